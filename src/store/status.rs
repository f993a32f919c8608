//! The two words the store keeps as text and the service decides by: where a batch is, and what
//! made a version. Both backends keep them in `TEXT` columns as these lower-case names (the
//! API shows the same names, and its document lists them), so the types encode and decode as
//! text.

use serde::{Deserialize, Serialize};

/// Maps a type with an `as_str` name to a `TEXT` column of either backend, read back by
/// `$parse` (a name it does not know is an error of the column, reported as corrupt data).
macro_rules! text_column {
    ($name:ident, $parse:expr) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            &'q str: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&'q str as sqlx::Encode<'q, DB>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&'r str as sqlx::Decode<'r, DB>>::decode(value)?;
                let parse: fn(&str) -> Option<$name> = $parse;
                parse(text).ok_or_else(|| format!("{text:?} is not a {}", stringify!($name)).into())
            }
        }
    };
}

pub(super) use text_column;

/// Declares a text-valued enum: its lower-case names (strum), serde and OpenAPI under the same
/// names, and its mapping to a `TEXT` column of either backend.
macro_rules! text_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(
            Clone,
            Copy,
            Debug,
            PartialEq,
            Eq,
            Hash,
            Serialize,
            Deserialize,
            strum::EnumString,
            strum::Display,
            strum::IntoStaticStr,
            strum::VariantArray,
            utoipa::ToSchema,
        )]
        #[serde(rename_all = "lowercase")]
        #[strum(serialize_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The stored (and API) name.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        text_column!($name, |text: &str| text.parse().ok());
    };
}

text_enum! {
    /// Where a batch is: the values the store writes (the API document's enum).
    pub enum BatchStatus {
        /// Stored, waiting to be folded.
        Queued,
        /// In the model's posterior, at the version it records.
        Folded,
        /// Not learnt from: unreadable, or rejected by review.
        Rejected,
        /// Waiting for review (it surprised the model beyond its drift threshold).
        Held,
    }
}

text_enum! {
    /// What made a version: the values the store writes (the API document's enum).
    pub enum VersionOrigin {
        /// The folder learnt batches.
        Fold,
        /// An earlier version made current again.
        Restore,
        /// The evidence approximation run again on everything learnt.
        Refit,
        /// Outputs or named features added to the model, the state widened with their exact
        /// zero statistics over the rows learnt before.
        Extend,
    }
}

#[cfg(test)]
mod tests {
    use strum::VariantArray;

    use super::*;

    #[test]
    fn names_read_back_and_match_serde() {
        for status in BatchStatus::VARIANTS {
            assert_eq!(status.as_str().parse::<BatchStatus>().unwrap(), *status);
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert_eq!(BatchStatus::Held.as_str(), "held");
        for origin in VersionOrigin::VARIANTS {
            assert_eq!(origin.as_str().parse::<VersionOrigin>().unwrap(), *origin);
            assert_eq!(
                serde_json::to_value(origin).unwrap(),
                serde_json::json!(origin.as_str())
            );
        }
        assert_eq!(VersionOrigin::Refit.to_string(), "refit");
        assert!("folding".parse::<BatchStatus>().is_err());
    }
}
