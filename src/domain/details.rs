//! What is wrong with a request, where: the details every refusal and warning carries.

use serde::Serialize;

/// One invalid value of a request: where it is (a JSON pointer) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Detail {
    /// JSON pointer to the value, e.g. `/x/3/7`.
    #[schema(example = "/x/3/7")]
    pub path: String,
    #[schema(example = "must be a finite number, found the string \"NaN\"")]
    pub message: String,
}

impl Detail {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A request that does not describe a valid value, with every problem found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    pub message: String,
    pub details: Vec<Detail>,
}

impl Invalid {
    pub fn new(message: impl Into<String>, details: Vec<Detail>) -> Self {
        Self {
            message: message.into(),
            details,
        }
    }

    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(message.clone(), vec![Detail::new(path, message)])
    }
}

/// At most this many details are reported for one request; the message says how many there were.
pub const MAX_DETAILS: usize = 100;

/// Collects details up to [`MAX_DETAILS`], counting the rest.
#[derive(Debug, Default)]
pub struct Details {
    list: Vec<Detail>,
    total: usize,
}

impl Details {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.total += 1;
        if self.list.len() < MAX_DETAILS {
            self.list.push(Detail::new(path, message));
        }
    }

    /// [`Self::push`] of a detail formed only when it is kept: a body with millions of bad
    /// cells costs a count for each past the first [`MAX_DETAILS`], not a message.
    pub fn push_with(&mut self, detail: impl FnOnce() -> (String, String)) {
        self.total += 1;
        if self.list.len() < MAX_DETAILS {
            let (path, message) = detail();
            self.list.push(Detail::new(path, message));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Adds `other`'s details (up to [`MAX_DETAILS`] in all) and counts all of them.
    pub fn extend(&mut self, other: &Details) {
        let room = MAX_DETAILS.saturating_sub(self.list.len());
        self.list.extend(other.list.iter().take(room).cloned());
        self.total += other.total;
    }

    /// The details as a response lists them (warnings, say): at most [`MAX_DETAILS`], then
    /// one line saying how many more there were.
    pub fn into_list(mut self) -> Vec<Detail> {
        if self.total > self.list.len() {
            let more = self.total - self.list.len();
            self.list
                .push(Detail::new("", format!("and {more} more like these")));
        }
        self.list
    }

    /// `Ok(())` when nothing was wrong, else the details under `what`.
    pub fn finish(self, what: &str) -> Result<(), Invalid> {
        if self.total == 0 {
            return Ok(());
        }
        let message = if self.total > self.list.len() {
            format!(
                "{what}: {} invalid values (the first {} are listed)",
                self.total,
                self.list.len()
            )
        } else if self.total == 1 {
            format!("{what}: {}", self.list[0].message)
        } else {
            format!("{what}: {} invalid values", self.total)
        };
        Err(Invalid::new(message, self.list))
    }
}

/// Escapes an object key for use in a JSON pointer (RFC 6901).
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `v` as a message quotes a number a client sent: the shortest decimal that reads back as `v`,
/// in exponent form beyond `[10⁻⁶, 10¹⁶)` (`1e300`, not the 301 digits of Rust's `Display`).
pub(crate) fn quote(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-6..1e16).contains(&v.abs()) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// A cell a client sent, quoted for a message: whole up to 64 bytes, else its start and its
/// length (a megabyte cell is not echoed back).
pub(crate) fn quote_cell(cell: &str) -> String {
    const SHOWN: usize = 64;
    if cell.len() <= SHOWN {
        return format!("{cell:?}");
    }
    let mut end = 40;
    while !cell.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &cell[..end], cell.len())
}

/// A short description of a JSON value's type, for error messages.
pub(crate) fn describe(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 32 => format!("the string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Details, MAX_DETAILS, quote, quote_cell};

    /// A cell is echoed whole up to 64 bytes; a longer one by its start (cut at a character)
    /// and its length; details past the first hundred are counted, never formed.
    #[test]
    fn long_cells_are_quoted_by_their_start_and_details_past_the_list_are_not_formed() {
        assert_eq!(quote_cell("1,5"), "\"1,5\"");
        let long = "é".repeat(1_000_000);
        let quoted = quote_cell(&long);
        assert_eq!(quoted, format!("{:?}… (2000000 bytes)", "é".repeat(20)));
        let mut details = Details::default();
        let mut formed = 0;
        for i in 0..1000 {
            details.push_with(|| {
                formed += 1;
                (format!("/rows/{i}"), "bad".to_owned())
            });
        }
        assert_eq!(formed, MAX_DETAILS);
        let invalid = details.finish("invalid").unwrap_err();
        assert_eq!(invalid.details.len(), MAX_DETAILS);
        assert!(
            invalid.message.contains("1000 invalid values"),
            "{}",
            invalid.message
        );
    }

    #[test]
    fn numbers_are_quoted_shortest_and_far_out_ones_in_exponent_form() {
        assert_eq!(quote(1e300), "1e300");
        assert_eq!(quote(-2.5e-300), "-2.5e-300");
        assert_eq!(quote(104.2), "104.2");
        assert_eq!(quote(120.0), "120");
        assert_eq!(quote(-0.0), "-0");
        assert_eq!(quote(f64::INFINITY), "inf");
    }
}
