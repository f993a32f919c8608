//! JSON request bodies read in one pass, with the memory a body can cost bounded by its limits.
//!
//! A `serde_json::Value` tree costs about 32 bytes per number and 60 more per row: a 32 MiB
//! body of `[1]` rows (8.4 million of them) becomes a tree of more than a gigabyte before a
//! row limit could be checked on it. Here the arrays of rows (`/x`, `/y`, `/spectra/values`)
//! are read straight into row-major `f64`s as the parser meets them: their rows are counted as
//! they arrive and the body is refused at the first row over the limit; a row's numbers are
//! kept only while every row so far is valid (an invalid body needs its problems, not its
//! values). Everything else in the body becomes a `Value` (a model specification, a batch
//! id, a spectrum's grid), at most [`MAX_OTHER_VALUES`] values of it. So a body of `n` bytes
//! costs its `n` bytes, its numbers (a number takes at least 2 bytes of JSON, `1,`, and 8 as an
//! `f64`: `4n`, up to twice that while the vector grows), and a small tree.
//!
//! A key repeated in any object is refused: JSON parsers disagree on which of two values
//! wins, and a body that means different things to different readers is not accepted.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{Details, Invalid, pointer_token};

/// Most values a body may hold outside its arrays of rows (a model specification with the
/// largest number of features and outputs holds about 3,100).
pub const MAX_OTHER_VALUES: usize = 10_000;

/// How wide the rows of an array of rows must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// Exactly this many numbers per row.
    Exact(usize),
    /// As many as the first row has, at most this many.
    FirstRow { max: usize },
}

/// An array of rows in a body: where it is (a JSON pointer) and how wide its rows must be.
#[derive(Clone, Copy, Debug)]
pub struct RowField {
    pub pointer: &'static str,
    pub width: Width,
}

/// Why a body was refused before its content was checked.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON (or not UTF-8), or a key repeated in an object.
    #[error("{0}")]
    Malformed(String),
    /// More rows, or more other values, than the limits allow.
    #[error("{0}")]
    TooLarge(String),
    /// Valid JSON that no value can hold: a number in a row beyond the range of a double.
    #[error("{0}")]
    Invalid(Invalid),
}

/// What was read at a [`RowField`]'s place.
#[derive(Debug)]
pub enum RowArray {
    /// Something else than an array: its description (`the string "a"`).
    NotArray(String),
    Rows(ReadRows),
}

/// An array read as rows: the row-major values when every row is valid, else the problems.
#[derive(Debug)]
pub struct ReadRows {
    pub rows: usize,
    /// The rows' width (for [`Width::FirstRow`], the first row's length).
    pub width: usize,
    /// The first row was wider than [`Width::FirstRow`] allows: no width was set.
    pub too_wide: bool,
    values: Vec<f64>,
    problems: Details,
}

impl ReadRows {
    /// The problems found, with their paths, added to `details`; the rows when there were none.
    pub fn take(self, details: &mut Details) -> Option<super::Rows> {
        if self.problems.is_empty() {
            return Some(super::Rows::from_row_major(
                self.rows,
                self.width,
                self.values,
            ));
        }
        details.extend(&self.problems);
        None
    }
}

/// A JSON body with its arrays of rows read apart from the rest.
#[derive(Debug)]
pub struct Body {
    value: Value,
    rows: Vec<(&'static str, RowArray)>,
}

impl Body {
    /// Reads `bytes` as JSON, the arrays at `fields` as rows of at most `max_rows` rows each.
    pub fn parse(bytes: &[u8], fields: &[RowField], max_rows: usize) -> Result<Self, BodyError> {
        let context = Context {
            fields,
            max_rows,
            other_values: RefCell::new(0),
            rows: RefCell::new(Vec::new()),
            refused: RefCell::new(None),
        };
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let read = NodeSeed {
            context: &context,
            pointer: Some(String::new()),
            place: Place::Root,
        }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
        match (read, context.refused.into_inner()) {
            (_, Some(refused)) => Err(refused),
            (Err(e), None) => Err(BodyError::Malformed(format!(
                "the body is not valid JSON: {e}"
            ))),
            (Ok(value), None) => Ok(Self {
                value,
                rows: context.rows.into_inner(),
            }),
        }
    }

    /// The body without its arrays of rows.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The body without its arrays of rows, owned.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// The array of rows read at `pointer`, taken out of the body; `None` when the body has
    /// none there (or it was taken).
    pub fn take_rows(&mut self, pointer: &str) -> Option<RowArray> {
        let i = self.rows.iter().position(|(at, _)| *at == pointer)?;
        Some(self.rows.swap_remove(i).1)
    }

    /// Whether the array of rows at `pointer` is there and empty.
    pub fn has_no_rows(&self, pointer: &str) -> bool {
        self.rows
            .iter()
            .any(|(at, rows)| *at == pointer && matches!(rows, RowArray::Rows(r) if r.rows == 0))
    }
}

/// Checks that `bytes` are one JSON value, without keeping any of it.
pub fn check_json(bytes: &[u8]) -> Result<(), BodyError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    serde::Deserialize::deserialize(&mut deserializer)
        .and_then(|IgnoredAny| deserializer.end())
        .map_err(|e| BodyError::Malformed(format!("the body is not valid JSON: {e}")))
}

/// What one parse shares between its seeds.
struct Context<'f> {
    fields: &'f [RowField],
    max_rows: usize,
    other_values: RefCell<usize>,
    rows: RefCell<Vec<(&'static str, RowArray)>>,
    /// Why the body was refused, when a seed stopped the parse for it (the parser's own error
    /// then only says where it stopped).
    refused: RefCell<Option<BodyError>>,
}

impl Context<'_> {
    fn refuse<E: serde::de::Error>(&self, why: BodyError) -> E {
        let message = why.to_string();
        *self.refused.borrow_mut() = Some(why);
        E::custom(message)
    }

    fn count_value<E: serde::de::Error>(&self) -> Result<(), E> {
        let mut count = self.other_values.borrow_mut();
        *count += 1;
        if *count > MAX_OTHER_VALUES {
            drop(count);
            return Err(self.refuse(BodyError::TooLarge(format!(
                "the body holds more than {MAX_OTHER_VALUES} values outside its rows"
            ))));
        }
        Ok(())
    }
}

/// Where a value sits: the chain of members and elements from the body's root, spelt out as a
/// JSON pointer only when a problem is reported there.
#[derive(Clone, Copy)]
enum Place<'p> {
    Root,
    Member(&'p Place<'p>, &'p str),
    Element(&'p Place<'p>, usize),
}

impl Place<'_> {
    fn pointer(&self) -> String {
        match self {
            Place::Root => String::new(),
            Place::Member(parent, key) => format!("{}/{}", parent.pointer(), pointer_token(key)),
            Place::Element(parent, i) => format!("{}/{i}", parent.pointer()),
        }
    }
}

/// The message for a number no double holds (`1e309`), wherever it is.
const BEYOND_DOUBLE: &str =
    "must be a finite number, found a number beyond the range of a double (±1.8e308)";

impl Context<'_> {
    /// `e` as it is, or, where it is the parser stopping at a number no double holds (which
    /// JSON itself allows), the body refused as invalid at `place`.
    fn name_out_of_range<E: serde::de::Error>(&self, place: Place<'_>, e: E) -> E {
        if self.refused.borrow().is_none() && e.to_string().starts_with(OUT_OF_RANGE) {
            self.refuse(BodyError::Invalid(Invalid::one(
                place.pointer(),
                BEYOND_DOUBLE,
            )))
        } else {
            e
        }
    }
}

/// A value anywhere but in an array of rows, at `place`. `pointer` is its JSON pointer while it
/// is short enough to lead to an array of rows (`None` below that).
struct NodeSeed<'c, 'f, 'p> {
    context: &'c Context<'f>,
    pointer: Option<String>,
    place: Place<'p>,
}

impl NodeSeed<'_, '_, '_> {
    /// The seed for the member or element `token` of this value.
    fn child(&self, token: &str) -> Option<String> {
        let pointer = format!("{}/{}", self.pointer.as_deref()?, pointer_token(token));
        self.context
            .fields
            .iter()
            .any(|f| f.pointer.starts_with(pointer.as_str()))
            .then_some(pointer)
    }
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.context.count_value()?;
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let pointer = self.child(&items.len().to_string());
            let place = Place::Element(&self.place, items.len());
            let item = seq.next_element_seed(NodeSeed {
                context: self.context,
                pointer,
                place,
            });
            match item.map_err(|e| self.context.name_out_of_range(place, e))? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let pointer = self.child(&key);
            if !seen.insert(key.clone()) {
                let at = Place::Member(&self.place, &key).pointer();
                return Err(self.context.refuse(BodyError::Malformed(format!(
                    "the key {key:?} appears more than once in an object (at {at:?})"
                ))));
            }
            let field = pointer
                .as_deref()
                .and_then(|p| self.context.fields.iter().find(|f| f.pointer == p).copied());
            match field {
                Some(field) => {
                    let rows = map
                        .next_value_seed(RowsSeed {
                            context: self.context,
                            field,
                        })
                        .map_err(|e| {
                            let place = Place::Member(&self.place, &key);
                            self.context.name_out_of_range(place, e)
                        })?;
                    if let Some(rows) = rows {
                        self.context.rows.borrow_mut().push((field.pointer, rows));
                    }
                }
                None => {
                    let place = Place::Member(&self.place, &key);
                    let value = map
                        .next_value_seed(NodeSeed {
                            context: self.context,
                            pointer,
                            place,
                        })
                        .map_err(|e| self.context.name_out_of_range(place, e))?;
                    members.insert(key, value);
                }
            }
        }
        Ok(Value::Object(members))
    }
}

/// The value at a [`RowField`].
struct RowsSeed<'c, 'f> {
    context: &'c Context<'f>,
    field: RowField,
}

impl<'de> DeserializeSeed<'de> for RowsSeed<'_, '_> {
    /// `None` for `null`: an optional field sent as `null` is a field left out.
    type Value = Option<RowArray>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Option<RowArray>, D::Error> {
        let field = self.field;
        let reader = RowsReader {
            context: self.context,
            rows: Accumulator {
                pointer: field.pointer,
                width: match field.width {
                    Width::Exact(width) => Some(width),
                    Width::FirstRow { .. } => None,
                },
                max_width: match field.width {
                    Width::Exact(width) => width,
                    Width::FirstRow { max } => max,
                },
                values: Vec::new(),
                problems: Details::default(),
                rows: 0,
                abandoned: false,
            },
        };
        Ok(match deserializer.deserialize_any(Shape(reader))? {
            Shaped::Seq(rows) => Some(RowArray::Rows(rows)),
            Shaped::Number(n) => Some(RowArray::NotArray(describe_number(&n))),
            Shaped::Other(what) => Some(RowArray::NotArray(what)),
            Shaped::Null => None,
        })
    }
}

/// A number as error messages describe it.
fn describe_number(n: &Number) -> String {
    format!("the number {n}")
}

/// A JSON value as error messages describe it, when it is not what was expected: what its
/// array holds is read by `R`; anything else is described.
enum Shaped<T> {
    Seq(T),
    Number(Number),
    Null,
    Other(String),
}

/// Reads the elements of an array.
trait SeqReader<'de> {
    type Output;
    fn read<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Output, A::Error>;
}

/// Any value, its array read by the reader in it.
struct Shape<R>(R);

impl<'de, R: SeqReader<'de>> DeserializeSeed<'de> for Shape<R> {
    type Value = Shaped<R::Output>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, R: SeqReader<'de>> Visitor<'de> for Shape<R> {
    type Value = Shaped<R::Output>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Shaped::Other(format!("the boolean {v}")))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Shaped::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Shaped::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // The parser yields only finite numbers (it refuses `1e999`).
        Ok(Number::from_f64(v).map_or_else(|| Shaped::Other("a number".into()), Shaped::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Shaped::Other(super::describe(&Value::String(
            v.chars().take(33).collect(),
        ))))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Shaped::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.read(seq).map(Shaped::Seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shaped::Other("an object".into()))
    }
}

/// Skips an array (the element of a row that is itself an array).
struct Skip;

impl<'de> SeqReader<'de> for Skip {
    type Output = ();

    fn read<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// The rows of one array of rows, as they are read.
struct Accumulator {
    pointer: &'static str,
    /// `None` until the first row has set it ([`Width::FirstRow`]).
    width: Option<usize>,
    max_width: usize,
    /// Row-major values, kept while no problem has been found.
    values: Vec<f64>,
    problems: Details,
    rows: usize,
    /// The first row was over the widest allowed: the other rows are only counted.
    abandoned: bool,
}

impl Accumulator {
    fn problem(&mut self, path: String, message: String) {
        self.problems.push(path, message);
        // An invalid array's values are never used: they are not kept either.
        self.values = Vec::new();
    }
}

/// An array of rows, counted against the limit as it is read.
struct RowsReader<'c, 'f> {
    context: &'c Context<'f>,
    rows: Accumulator,
}

impl<'de> SeqReader<'de> for RowsReader<'_, '_> {
    type Output = ReadRows;

    fn read<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ReadRows, A::Error> {
        let Self { context, mut rows } = self;
        loop {
            if rows.rows == context.max_rows {
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(context.refuse(BodyError::TooLarge(format!(
                        "too many rows in {}: more than {}, the limit of one request",
                        rows.pointer, context.max_rows
                    ))));
                }
                break;
            }
            if rows.abandoned {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                rows.rows += 1;
                continue;
            }
            let i = rows.rows;
            let reader = RowReader {
                context,
                rows: &mut rows,
                i,
            };
            let Some(row) = seq.next_element_seed(Shape(reader))? else {
                break;
            };
            let found = match row {
                Shaped::Seq(()) => None,
                Shaped::Number(n) => Some(describe_number(&n)),
                Shaped::Null => Some("null".to_owned()),
                Shaped::Other(what) => Some(what),
            };
            if let Some(found) = found {
                // Before any row has set the width, a row's length is not yet known.
                let message = match rows.width {
                    Some(width) => format!("must be an array of {width} numbers, found {found}"),
                    None => format!("must be an array of numbers (a row), found {found}"),
                };
                rows.width.get_or_insert(0);
                rows.problem(format!("{}/{i}", rows.pointer), message);
            }
            rows.rows += 1;
        }
        Ok(ReadRows {
            rows: rows.rows,
            width: rows.width.unwrap_or(0),
            too_wide: rows.abandoned,
            values: rows.values,
            problems: rows.problems,
        })
    }
}

/// How serde_json's message for a number beyond a double's range begins.
const OUT_OF_RANGE: &str = "number out of range";

/// One row of an array of rows.
struct RowReader<'a, 'c, 'f> {
    context: &'c Context<'f>,
    rows: &'a mut Accumulator,
    i: usize,
}

impl<'de> SeqReader<'de> for RowReader<'_, '_, '_> {
    type Output = ();

    fn read<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Self { context, rows, i } = self;
        let start = rows.values.len();
        let keep = rows.problems.is_empty();
        let mut entry_problems = Details::default();
        let mut n = 0;
        loop {
            let entry = match seq.next_element_seed(Shape(Skip)) {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                // The parser stops at a number no double holds (`1e309`): the body is JSON,
                // and its cell is named as a CSV's would be.
                Err(e) if e.to_string().starts_with(OUT_OF_RANGE) => {
                    let path = format!("{}/{i}/{n}", rows.pointer);
                    return Err(
                        context.refuse(BodyError::Invalid(Invalid::one(path, BEYOND_DOUBLE)))
                    );
                }
                Err(e) => return Err(e),
            };
            let found = match entry {
                Shaped::Number(v) => {
                    if keep && n < rows.max_width {
                        rows.values.push(v.as_f64().unwrap_or(f64::NAN));
                    }
                    None
                }
                Shaped::Seq(()) => Some("an array".to_owned()),
                Shaped::Null => Some("null".to_owned()),
                Shaped::Other(what) => Some(what),
            };
            if let Some(found) = found {
                entry_problems.push(
                    format!("{}/{i}/{n}", rows.pointer),
                    format!("must be a finite number, found {found}"),
                );
            }
            n += 1;
        }
        match rows.width {
            None if n > rows.max_width => {
                rows.problem(
                    format!("{}/{i}", rows.pointer),
                    format!("at most {} bands are allowed, found {n}", rows.max_width),
                );
                rows.abandoned = true;
                return Ok(());
            }
            None => rows.width = Some(n),
            Some(width) if n != width => {
                rows.values.truncate(start);
                rows.problem(
                    format!("{}/{i}", rows.pointer),
                    format!("must have {width} values, found {n}"),
                );
                return Ok(());
            }
            Some(_) => {}
        }
        if !entry_problems.is_empty() {
            rows.problems.extend(&entry_problems);
            rows.values = Vec::new();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Detail, parse_rows};

    const X: RowField = RowField {
        pointer: "/x",
        width: Width::Exact(2),
    };
    const SPECTRA: RowField = RowField {
        pointer: "/spectra/values",
        width: Width::FirstRow { max: 3 },
    };

    fn parse(body: &str, max_rows: usize) -> Result<Body, BodyError> {
        Body::parse(body.as_bytes(), &[X, SPECTRA], max_rows)
    }

    /// The details `parse_rows` reports for the rows at `pointer`.
    fn problems(body: &str, pointer: &str) -> Vec<Detail> {
        let mut body = parse(body, 100).expect("JSON");
        let mut details = Details::default();
        assert!(parse_rows(body.take_rows(pointer), pointer, &mut details).is_none());
        match details.finish("invalid") {
            Err(invalid) => invalid.details,
            Ok(()) => panic!("no problems"),
        }
    }

    #[test]
    fn rows_are_read_apart_from_the_rest_of_the_body() {
        let mut body = parse(
            r#"{"batch_id": "b-1", "x": [[1, 2.5], [-0.0, 3e2]], "spectra": {"start_nm": 400, "values": [[1, 2, 3]]}}"#,
            100,
        )
        .expect("valid");
        assert_eq!(
            body.value(),
            &serde_json::json!({"batch_id": "b-1", "spectra": {"start_nm": 400}})
        );
        let mut details = Details::default();
        let x = parse_rows(body.take_rows("/x"), "/x", &mut details).expect("valid rows");
        assert_eq!((x.rows(), x.width()), (2, 2));
        assert_eq!(x.values(), &[1.0, 2.5, -0.0, 300.0]);
        assert!(x.values()[2].is_sign_negative());
        let spectra =
            parse_rows(body.take_rows("/spectra/values"), "", &mut details).expect("valid spectra");
        assert_eq!((spectra.rows(), spectra.width()), (1, 3));
        assert!(body.take_rows("/x").is_none(), "taken once");
        assert!(details.is_empty());
    }

    #[test]
    fn the_parse_stops_at_the_first_row_over_the_limit() {
        // What follows the third row is not even JSON: the parse never gets there.
        let refused = parse(r#"{"x": [[1, 2], [3, 4], [5, 6], oops"#, 2).unwrap_err();
        assert!(
            matches!(&refused, BodyError::TooLarge(m) if m.contains("/x")),
            "{refused:?}"
        );
        assert!(parse(r#"{"x": [[1, 2], [3, 4]]}"#, 2).is_ok());
        // Invalid rows count too, and so do the rows of an array read only to be counted.
        let refused = parse(r#"{"x": ["a", "b", "c"]}"#, 2).unwrap_err();
        assert!(matches!(refused, BodyError::TooLarge(_)));
        let refused =
            parse(r#"{"spectra": {"values": [[1, 2, 3, 4], [1], [1], oops"#, 2).unwrap_err();
        assert!(matches!(refused, BodyError::TooLarge(_)), "{refused:?}");
    }

    /// A row that is not an array is named as such, also before any row has set the width.
    #[test]
    fn a_flat_array_of_rows_says_it_wants_rows() {
        let found = problems(r#"{"spectra": {"values": [50, 60]}}"#, "/spectra/values");
        assert_eq!(found[0].path, "/spectra/values/0");
        assert_eq!(
            found[0].message,
            "must be an array of numbers (a row), found the number 50"
        );
    }

    #[test]
    fn a_repeated_key_is_refused_wherever_it_is() {
        for body in [
            r#"{"x": [[1, 2]], "x": [[3, 4]]}"#,
            r#"{"spectra": {"start_nm": 400, "start_nm": 410}}"#,
            r#"{"a": [{"k": 1, "k": 1}]}"#,
        ] {
            let refused = parse(body, 100).unwrap_err();
            assert!(
                matches!(&refused, BodyError::Malformed(m) if m.contains("more than once")),
                "{body}: {refused:?}"
            );
        }
        let refused = parse(r#"{"spectra": {"a": 1, "a": 2}}"#, 100).unwrap_err();
        assert!(refused.to_string().contains("/spectra/a"), "{refused}");
        // Wherever the object is, the place is spelt out in full.
        let refused = parse(r#"{"bounds": {"red/1": {"max": 1, "max": 2}}}"#, 100).unwrap_err();
        assert!(
            refused.to_string().contains(r#"(at "/bounds/red~11/max")"#),
            "{refused}"
        );
        let refused = parse(r#"{"a": [0, {"k": 1, "k": 1}]}"#, 100).unwrap_err();
        assert!(
            refused.to_string().contains(r#"(at "/a/1/k")"#),
            "{refused}"
        );
    }

    #[test]
    fn values_outside_the_rows_are_bounded() {
        let many = format!(r#"{{"junk": [{}0]}}"#, "0,".repeat(MAX_OTHER_VALUES));
        assert!(matches!(parse(&many, 100), Err(BodyError::TooLarge(_))));
        let fewer = format!(r#"{{"junk": [{}0]}}"#, "0,".repeat(MAX_OTHER_VALUES - 3));
        assert!(parse(&fewer, 100).is_ok());
    }

    #[test]
    fn malformed_json_is_malformed() {
        for body in ["", "{", r#"{"x": [[1, 2]]} trailing"#] {
            assert!(
                matches!(parse(body, 100), Err(BodyError::Malformed(_))),
                "{body:?}"
            );
            assert!(check_json(body.as_bytes()).is_err(), "{body:?}");
        }
        // A number no `f64` holds: in a row, the cell is named.
        let Err(BodyError::Invalid(huge)) = parse(r#"{"x": [[1, 2], [3, -1e999]]}"#, 100) else {
            panic!("a row's number beyond a double is invalid, with its path");
        };
        assert_eq!(huge.details.len(), 1, "{huge:?}");
        assert_eq!(huge.details[0].path, "/x/1/1");
        assert!(huge.details[0].message.contains("range"), "{huge:?}");
        // Elsewhere the value is named too: JSON allows such a number; a double does not.
        for (body, path) in [
            (r#"{"junk": 1e999, "x": [[1, 2]]}"#, "/junk"),
            (r#"{"x": -1e999}"#, "/x"),
            (r#"{"a": {"b/c": [0, 1, {"d": 2e400}]}}"#, "/a/b~1c/2/d"),
            (r#"{"a": [[1], [2, -3e999]]}"#, "/a/1/1"),
        ] {
            let Err(BodyError::Invalid(huge)) = parse(body, 100) else {
                panic!("{body}: a number beyond a double is invalid, with its path");
            };
            assert_eq!(huge.details.len(), 1, "{body}: {huge:?}");
            assert_eq!(huge.details[0].path, path, "{body}");
            assert!(huge.details[0].message.contains("range"), "{huge:?}");
        }
        let root = parse("1e999", 100);
        assert!(matches!(root, Err(BodyError::Malformed(_))), "{root:?}");
        assert!(
            check_json(br#"{"x": [[1, 2]], "x": 1}"#).is_ok(),
            "syntax only"
        );
    }

    #[test]
    fn every_invalid_row_and_value_is_reported_with_its_path() {
        let found = problems(
            r#"{"x": [[1, 2], "r", [1], [1, "2"], [null, [3]], {"a": 1}, [1, 2, 3], 7]}"#,
            "/x",
        );
        let expected = [
            (
                "/x/1",
                "must be an array of 2 numbers, found the string \"r\"",
            ),
            ("/x/2", "must have 2 values, found 1"),
            ("/x/3/1", "must be a finite number, found the string \"2\""),
            ("/x/4/0", "must be a finite number, found null"),
            ("/x/4/1", "must be a finite number, found an array"),
            ("/x/5", "must be an array of 2 numbers, found an object"),
            ("/x/6", "must have 2 values, found 3"),
            ("/x/7", "must be an array of 2 numbers, found the number 7"),
        ];
        let found: Vec<_> = found
            .iter()
            .map(|d| (d.path.as_str(), d.message.as_str()))
            .collect();
        assert_eq!(found, expected);
        let found = problems(r#"{"x": {"a": 1}}"#, "/x");
        assert_eq!(
            found[0].message,
            "must be an array of rows, found an object"
        );
        let found = problems(r#"{"y": 1}"#, "/x");
        assert_eq!(found[0].message, "is required");
    }

    #[test]
    fn the_first_row_sets_the_width_of_spectra() {
        let found = problems(
            r#"{"spectra": {"values": [[1, 2], [1, 2, 3]]}}"#,
            "/spectra/values",
        );
        assert_eq!(found[0].path, "/spectra/values/1");
        assert_eq!(found[0].message, "must have 2 values, found 3");
        let mut body = parse(r#"{"spectra": {"values": [[1, 2, 3, 4], [1]]}}"#, 100).unwrap();
        let Some(RowArray::Rows(rows)) = body.take_rows("/spectra/values") else {
            panic!("rows");
        };
        assert!(rows.too_wide);
        let mut details = Details::default();
        assert!(rows.take(&mut details).is_none());
        let invalid = details.finish("invalid").unwrap_err();
        assert_eq!(invalid.details.len(), 1, "the other rows are only counted");
        assert_eq!(invalid.details[0].path, "/spectra/values/0");
        assert!(invalid.details[0].message.contains("at most 3 bands"));
    }

    #[test]
    fn problems_beyond_the_listed_ones_are_counted() {
        let rows = vec!["[\"a\", \"b\"]"; 80].join(",");
        let mut body = parse(&format!(r#"{{"x": [{rows}]}}"#), 100).unwrap();
        let mut details = Details::default();
        assert!(parse_rows(body.take_rows("/x"), "/x", &mut details).is_none());
        let invalid = details.finish("invalid").unwrap_err();
        assert!(
            invalid.message.contains("160 invalid values"),
            "{}",
            invalid.message
        );
        assert_eq!(invalid.details.len(), crate::domain::MAX_DETAILS);
    }
}
