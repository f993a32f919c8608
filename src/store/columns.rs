//! Column types whose storage differs between the dialects, so that each record has one row
//! mapping (`sqlx::FromRow`) and one way to be bound, whichever backend reads or writes it.
//!
//! * [`List`]: a PostgreSQL array (`float8[]`, `text[]`); SQLite has no arrays, so there it is
//!   JSON text.
//! * [`Sha256Digest`]: a digest stored as bytes, checked to be 32 of them.
//! * `Scope`: a key's scope, stored as its name.
//!
//! A value that does not decode is an error of its `Decode` (reported as corrupt data), not of
//! a `#[sqlx(try_from)]` conversion after it, whose error sqlx 0.8 reports without its message.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

use super::status::text_column;
use crate::domain::Scope;

/// A list column: `T` is a `Vec` (or an `Option` of one, for a nullable column).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct List<T>(pub T);

impl<T: Type<Postgres>> Type<Postgres> for List<T> {
    fn type_info() -> PgTypeInfo {
        T::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        T::compatible(ty)
    }
}

impl<'r, T: Decode<'r, Postgres>> Decode<'r, Postgres> for List<T> {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        T::decode(value).map(List)
    }
}

impl<'q, T: Encode<'q, Postgres>> Encode<'q, Postgres> for List<T> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        self.0.encode_by_ref(buf)
    }
}

impl<T> Type<Sqlite> for List<T> {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <str as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r, T: DeserializeOwned> Decode<'r, Sqlite> for List<T> {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        // NULL reads as JSON `null`: a value for an `Option`, an error for a `Vec`.
        let text = <Option<&str> as Decode<Sqlite>>::decode(value)?;
        Ok(List(serde_json::from_str(text.unwrap_or("null"))?))
    }
}

impl<'q, T: Serialize> Encode<'q, Sqlite> for List<T> {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        match serde_json::to_string(&self.0)? {
            json if json == "null" => Ok(IsNull::Yes),
            json => <String as Encode<Sqlite>>::encode(json, buf),
        }
    }
}

/// Unwrapping, for the row mappings' `#[sqlx(try_from = …)]` (a blanket impl over `T` is not
/// possible: `From<T> for T` exists).
macro_rules! unwrap_list {
    ($($t:ty),*) => {$(
        impl From<List<$t>> for $t {
            fn from(list: List<$t>) -> Self {
                list.0
            }
        }
    )*};
}
unwrap_list!(
    Vec<Option<f64>>,
    Option<Vec<Option<f64>>>,
    Vec<String>,
    Vec<Scope>
);

// A key's scope, stored as its name (in a `text[]` or a JSON array).
text_column!(Scope, Scope::parse);

impl PgHasArrayType for Scope {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }

    fn array_compatible(ty: &PgTypeInfo) -> bool {
        <&str as PgHasArrayType>::array_compatible(ty)
    }
}

/// A SHA-256 digest column (`bytea` or `BLOB`): `T` is `[u8; 32]`, or an `Option` of one for
/// a nullable column. Its length is checked when it is read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sha256Digest<T>(pub T);

impl<T, DB: sqlx::Database> Type<DB> for Sha256Digest<T>
where
    Vec<u8>: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <Vec<u8> as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <Vec<u8> as Type<DB>>::compatible(ty)
    }
}

fn digest(bytes: &[u8]) -> Result<[u8; 32], BoxDynError> {
    Ok(<[u8; 32]>::try_from(bytes)
        .map_err(|_| format!("a SHA-256 digest is 32 bytes, not {}", bytes.len()))?)
}

impl<'r, DB: sqlx::Database> Decode<'r, DB> for Sha256Digest<[u8; 32]>
where
    &'r [u8]: Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, BoxDynError> {
        digest(<&[u8] as Decode<DB>>::decode(value)?).map(Sha256Digest)
    }
}

impl<'r, DB: sqlx::Database> Decode<'r, DB> for Sha256Digest<Option<[u8; 32]>>
where
    Option<&'r [u8]>: Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let bytes = <Option<&[u8]> as Decode<DB>>::decode(value)?;
        Ok(Sha256Digest(bytes.map(digest).transpose()?))
    }
}

impl From<Sha256Digest<[u8; 32]>> for [u8; 32] {
    fn from(digest: Sha256Digest<[u8; 32]>) -> Self {
        digest.0
    }
}

impl From<Sha256Digest<Option<[u8; 32]>>> for Option<[u8; 32]> {
    fn from(digest: Sha256Digest<Option<[u8; 32]>>) -> Self {
        digest.0
    }
}
