//! The fast paths for well-formed bodies of rows: JSON (`{"x": [[…]], "y": [[…]]}`, and a
//! spectral predict request's or batch's `{"spectra": {"start_nm", "interval_nm", "values":
//! [[…]]}, "x": [[…]], "y": [[…]]}`) and plain CSV.
//!
//! A 1,000-row batch of 35 columns holds 35,000 numbers. Read through a `serde_json::Value`
//! tree, each costs a heap node, and `serde_json`'s exact float reader (needed, so that a
//! batch sent as JSON has the same bits as the same batch sent as CSV) is slow on the 17-digit
//! numbers that instruments and scripts print. Read through the csv crate, each record is
//! copied into its buffers and every cell checked for UTF-8 on its own. These readers accept
//! only the plain shape of a valid request and read every number correctly rounded, straight
//! into row-major values ([`decimal`]: nearly every number from the digits the scan reads, the
//! rest by the standard library's parser). Anything else makes them give up
//! (`None`), and the caller reads the body the full way, which names every problem with its
//! path. Whatever they accept, the full way accepts too, with the same values (tested in
//! `tests` below).

use super::header::{Column, csv_columns};
use super::{ModelSpec, Rows};

/// `10^k` for `k ≤ 22`: every one is exact in `f64`.
const POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A decimal number read by [`decimal`].
struct Decimal {
    /// Where its text ends.
    end: usize,
    /// Its value, correctly rounded, where Clinger's fast path or Eisel–Lemire gives it from
    /// the digits read; `None`: its text is to be read by the standard library's parser.
    exact: Option<f64>,
}

/// The number in JSON's grammar (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`) that
/// starts at `bytes[at]`; `None` when none does. Its digits form the integer significand
/// `w` with the number equal to `±w · 10^q`; where `w ≤ 2⁵³` and `|q| ≤ 22`, both `w` and `10^|q|`
/// are exact doubles and one correctly rounded product or quotient is the correctly rounded
/// value (Clinger 1990); other numbers of at most 19 digits go to [`eisel_lemire`]. The standard
/// library's parser takes the same paths for these numbers, after scanning the text a second
/// time.
fn decimal(bytes: &[u8], mut at: usize) -> Option<Decimal> {
    /// The digits at `at` appended to `w` (wrapping: only read when there are at most 19), and
    /// where they end. A run longer than four (instruments print 16 and 17 digits) goes on
    /// eight at a time while eight follow ([`eight_digits`]); a short run (a lab's four
    /// decimals) never pays for a word it cannot use.
    #[inline(always)]
    fn digits(bytes: &[u8], mut at: usize, mut w: u64) -> (usize, u64) {
        for _ in 0..4 {
            match bytes.get(at) {
                Some(&byte @ b'0'..=b'9') => {
                    w = w.wrapping_mul(10).wrapping_add(u64::from(byte - b'0'));
                    at += 1;
                }
                _ => return (at, w),
            }
        }
        if !matches!(bytes.get(at), Some(b'0'..=b'9')) {
            return (at, w);
        }
        while let Some(eight) = bytes.get(at..at + 8).and_then(eight_digits) {
            // The same as eight steps of `w·10 + d`, modulo 2⁶⁴.
            w = w.wrapping_mul(100_000_000).wrapping_add(eight);
            at += 8;
        }
        while let Some(&byte @ b'0'..=b'9') = bytes.get(at) {
            w = w.wrapping_mul(10).wrapping_add(u64::from(byte - b'0'));
            at += 1;
        }
        (at, w)
    }
    let negative = bytes.get(at) == Some(&b'-');
    if negative {
        at += 1;
    }
    let (mut w, mut count) = (0u64, 0usize);
    match bytes.get(at)? {
        b'0' => at += 1,
        b'1'..=b'9' => {
            let start = at;
            (at, w) = digits(bytes, at, w);
            count = at - start;
        }
        _ => return None,
    }
    let mut q = 0i64;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        (at, w) = digits(bytes, at, w);
        let fraction = at - start;
        if fraction == 0 {
            return None;
        }
        count += fraction;
        q = -(fraction as i64);
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        let sign = match bytes.get(at) {
            Some(b'-') => -1,
            Some(b'+') => 1,
            _ => 0,
        };
        if sign != 0 {
            at += 1;
        }
        let start = at;
        let mut exponent = 0i64;
        while let Some(&byte @ b'0'..=b'9') = bytes.get(at) {
            exponent = (exponent * 10 + i64::from(byte - b'0')).min(1 << 32);
            at += 1;
        }
        if at == start {
            return None;
        }
        q += if sign < 0 { -exponent } else { exponent };
    }
    let magnitude = if count > 19 {
        // `w` wrapped past 2⁶⁴: only the text holds the number.
        None
    } else if w <= 1 << 53 && q.abs() <= 22 {
        // Exact conversions: w ≤ 2⁵³ and |q| ≤ 22.
        let (w, power) = (w as f64, POWERS_OF_TEN[q.unsigned_abs() as usize]);
        Some(if q < 0 { w / power } else { w * power })
    } else {
        eisel_lemire(w, q)
    };
    let exact = magnitude.map(|m| if negative { -m } else { m });
    Some(Decimal { end: at, exact })
}

/// `w · 10^q` correctly rounded, by the Eisel–Lemire algorithm (Lemire, "Number parsing at a
/// gigabyte per second", 2021, §5–6): `w` normalised times a 128-bit truncation of `5^q`, taken
/// where the truncation cannot move the rounding; `None` in the rare case it could (a value
/// within the truncation's error of halfway between two doubles), left to the standard
/// library's parser, which settles it exactly. The standard library runs the same algorithm
/// after scanning the text again; zero and infinity come out as it gives them.
#[inline]
fn eisel_lemire(w: u64, q: i64) -> Option<f64> {
    use lexical_parse_float::{float::extended_to_float, lemire::compute_float};
    let extended = compute_float::<f64>(q, w, false);
    (extended.exp >= 0).then(|| extended_to_float::<f64>(extended))
}

/// The value of eight ASCII digits, the first the most significant; `None` when `chunk` is not
/// eight digits. Read as one little-endian word and combined pairwise by three multiplications
/// (Lemire, "Number parsing at a gigabyte per second", 2021, §7).
#[inline(always)]
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let word = u64::from_le_bytes(chunk.try_into().ok()?);
    // Each byte is a digit iff its high nibble is 3 and adding 6 leaves it 3 (0x30..=0x39).
    let high = word & 0xF0F0_F0F0_F0F0_F0F0;
    let carried = (word.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4;
    if high | carried != 0x3333_3333_3333_3333 {
        return None;
    }
    // Byte i holds digit d_i (d_0 the first). Each step joins neighbours: pairs, then fours,
    // then the two fours.
    let d = word - 0x3030_3030_3030_3030;
    let pairs = d.wrapping_mul(10).wrapping_add(d >> 8);
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL_HIGH: u64 = 100 + (1_000_000 << 32);
    const MUL_LOW: u64 = 1 + (10_000 << 32);
    Some(
        (pairs & MASK)
            .wrapping_mul(MUL_HIGH)
            .wrapping_add(((pairs >> 16) & MASK).wrapping_mul(MUL_LOW))
            >> 32,
    )
}

/// What [`fast_rows_object`] read: the row arrays in the order of its `fields`.
#[derive(Debug)]
pub struct FastObject {
    pub batch_id: Option<String>,
    pub rows: Vec<Rows>,
}

/// Reads `body` as a JSON object whose members are exactly the row arrays named in `fields`
/// (each a non-empty array of at most `max_rows` rows of exactly its width of finite numbers)
/// and, when
/// `accept_batch_id`, an optional `batch_id` (a string or null). `None` for anything else: an
/// unknown, missing or repeated member, a string with an escape, a row of another width, a
/// value that is not a number, malformed JSON.
pub fn fast_rows_object(
    body: &[u8],
    fields: &[(&'static str, usize)],
    accept_batch_id: bool,
    max_rows: usize,
) -> Option<FastObject> {
    let mut scan = Scanner::new(body)?;
    let mut rows: Vec<Option<Rows>> = vec![None; fields.len()];
    let mut batch_id: Option<Option<String>> = None;
    scan.expect(b'{')?;
    if scan.peek()? != b'}' {
        loop {
            let key = scan.string()?;
            scan.expect(b':')?;
            if accept_batch_id && key == "batch_id" && batch_id.is_none() {
                batch_id = Some(scan.batch_id()?);
            } else {
                let i = fields.iter().position(|(name, _)| *name == key)?;
                if rows[i].is_some() {
                    return None;
                }
                rows[i] = Some(scan.rows(fields[i].1, max_rows)?);
            }
            if scan.peek()? == b',' {
                scan.at += 1;
            } else {
                break;
            }
        }
    }
    scan.expect(b'}')?;
    scan.skip_whitespace();
    if scan.at != body.len() {
        return None;
    }
    Some(FastObject {
        batch_id: batch_id.flatten(),
        rows: rows.into_iter().collect::<Option<Vec<_>>>()?,
    })
}

/// What [`fast_spectra_object`] read: a request's spectra, on the grid it names, and its named
/// features; for a batch, its outputs and id too.
#[derive(Debug)]
pub struct FastSpectra {
    pub start_nm: f64,
    pub interval_nm: f64,
    /// One spectrum a row, as many bands as the first row holds.
    pub values: Rows,
    /// The named features' rows, read when the model has named features.
    pub x: Option<Rows>,
    /// A batch's outputs, read when outputs were asked for.
    pub y: Option<Rows>,
    /// A batch's `batch_id`, when it names one.
    pub batch_id: Option<String>,
}

/// Reads `body` as a predict request or, when `outputs` is given, a batch of a model with a
/// spectrum: a JSON object whose members are exactly `spectra` (`{"start_nm", "interval_nm",
/// "values"}`, each once, in any order: two finite numbers and a non-empty array of at most
/// `max_rows` rows of the first row's width, at most `max_bands`), when `features` is not 0,
/// `x` (rows of exactly `features` finite numbers) and, for a batch, `y` (rows of exactly
/// `outputs` finite numbers) and an optional `batch_id` (a string or null). `None` for anything
/// else, as [`fast_rows_object`]; whether the grid is valid, covers the model's and the arrays
/// hold as many rows is for the caller.
pub fn fast_spectra_object(
    body: &[u8],
    features: usize,
    outputs: Option<usize>,
    max_bands: usize,
    max_rows: usize,
) -> Option<FastSpectra> {
    let mut scan = Scanner::new(body)?;
    let (mut spectra, mut x, mut y, mut batch_id) = (None, None, None, None);
    scan.expect(b'{')?;
    loop {
        let key = scan.string()?;
        scan.expect(b':')?;
        match (key, outputs) {
            ("spectra", _) if spectra.is_none() => {
                spectra = Some(scan.spectra(max_bands, max_rows)?);
            }
            ("x", _) if x.is_none() && features > 0 => x = Some(scan.rows(features, max_rows)?),
            ("y", Some(width)) if y.is_none() => y = Some(scan.rows(width, max_rows)?),
            ("batch_id", Some(_)) if batch_id.is_none() => batch_id = Some(scan.batch_id()?),
            _ => return None,
        }
        if scan.peek()? != b',' {
            break;
        }
        scan.at += 1;
    }
    scan.expect(b'}')?;
    scan.skip_whitespace();
    if scan.at != body.len() || (features > 0 && x.is_none()) || y.is_none() != outputs.is_none() {
        return None;
    }
    let (start_nm, interval_nm, values) = spectra?;
    Some(FastSpectra {
        start_nm,
        interval_nm,
        values,
        x,
        y,
        batch_id: batch_id.flatten(),
    })
}

struct Scanner<'a> {
    text: &'a str,
    /// `text` as bytes.
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `body`; `None` when it is not UTF-8. Validated once here, so
    /// that every number's text is a cheap slice of it.
    fn new(body: &'a [u8]) -> Option<Self> {
        Some(Self {
            text: std::str::from_utf8(body).ok()?,
            bytes: body,
            at: 0,
        })
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, text: &[u8]) -> Option<()> {
        let end = self.at.checked_add(text.len())?;
        (self.bytes.get(self.at..end)? == text).then(|| self.at = end)
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
        let text = self.text.get(start..self.at)?;
        self.at += 1;
        Some(text)
    }

    /// A batch id: a string, or `null` for none.
    fn batch_id(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Some(None)
        } else {
            Some(Some(self.string()?.to_owned()))
        }
    }

    /// A JSON number, rounded to the nearest `f64` ([`decimal`]); `None` when it is not finite
    /// there. Minus zero reads as `-0.0`, as it does in `serde_json`.
    fn number(&mut self) -> Option<f64> {
        self.skip_whitespace();
        let start = self.at;
        let number = decimal(self.bytes, start)?;
        self.at = number.end;
        let value = match number.exact {
            Some(value) => value,
            None => self.text.get(start..number.end)?.parse().ok()?,
        };
        value.is_finite().then_some(value)
    }

    /// A `spectra` object: `start_nm`, `interval_nm` and `values`, each exactly once.
    fn spectra(&mut self, max_bands: usize, max_rows: usize) -> Option<(f64, f64, Rows)> {
        let (mut start, mut interval, mut values) = (None, None, None);
        self.expect(b'{')?;
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            match key {
                "start_nm" if start.is_none() => start = Some(self.number()?),
                "interval_nm" if interval.is_none() => interval = Some(self.number()?),
                "values" if values.is_none() => {
                    values = Some(self.rows_of_first_width(max_bands, max_rows)?);
                }
                _ => return None,
            }
            if self.peek()? != b',' {
                break;
            }
            self.at += 1;
        }
        self.expect(b'}')?;
        Some((start?, interval?, values?))
    }

    /// A non-empty array of at most `max_rows` rows of exactly `width` numbers.
    fn rows(&mut self, width: usize, max_rows: usize) -> Option<Rows> {
        self.rows_of(Some(width), width, max_rows)
    }

    /// A non-empty array of at most `max_rows` rows of the first row's width, 1 to `max_width`
    /// numbers.
    fn rows_of_first_width(&mut self, max_width: usize, max_rows: usize) -> Option<Rows> {
        self.rows_of(None, max_width, max_rows)
    }

    /// Rows of `width` numbers, or, for `None`, of the first row's (at most `max_width`: a row
    /// longer than that is given up as soon as it is).
    fn rows_of(
        &mut self,
        mut width: Option<usize>,
        max_width: usize,
        max_rows: usize,
    ) -> Option<Rows> {
        self.expect(b'[')?;
        // One row to start with: a predict request has one.
        let mut values = Vec::with_capacity(width.unwrap_or(0));
        let mut rows = 0;
        loop {
            if rows == max_rows {
                return None;
            }
            self.expect(b'[')?;
            let start = self.at;
            match width {
                Some(width) => {
                    for j in 0..width {
                        if j > 0 {
                            self.expect(b',')?;
                        }
                        values.push(self.number()?);
                    }
                }
                None => loop {
                    if values.len() == max_width {
                        return None;
                    }
                    values.push(self.number()?);
                    if self.peek()? != b',' {
                        break;
                    }
                    self.at += 1;
                },
            }
            let row_width = *width.get_or_insert(values.len());
            self.expect(b']')?;
            rows += 1;
            if rows == 1 {
                // Room for as many more rows as the rest of the body could hold were they as
                // long as this one: a batch is then read without moving its values again.
                let length = (self.at - start).max(1);
                let more = (self.bytes.len() - self.at) / length;
                values.reserve(more.min(max_rows - 1) * row_width);
            }
            match self.peek()? {
                b',' => self.at += 1,
                b']' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(Rows::from_row_major(rows, width?, values))
    }
}

/// Reads a CSV batch for `spec` when it is plain: UTF-8 without a quote character, lines ending
/// in `\n` or `\r\n`, a header that maps onto `spec`, then at most `max_rows` rows of exactly
/// the header's width of finite numbers (lines that are empty or hold only empty cells are
/// skipped, as the full reader skips them). Returns the feature and output rows; `None` for
/// anything else, which the csv crate then reads (quoted fields, lone `\r` line ends) or
/// refuses with every problem named.
pub fn fast_csv(body: &[u8], spec: &ModelSpec, max_rows: usize) -> Option<(Rows, Rows)> {
    let text = std::str::from_utf8(body).ok()?;
    // csv strips a byte-order mark, as spreadsheets write one.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.is_empty());
    let header = lines.next()?;
    if header.contains(['\r', '"']) {
        return None;
    }
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let columns = csv_columns(&names, spec).ok()?;
    let (p, m) = (spec.input_width(), spec.outputs.len());
    // At most one row per line: sized once.
    let lines_left = memchr::memchr_iter(b'\n', body).count() + 1;
    let capacity = lines_left.min(max_rows);
    let (mut x, mut y) = (
        Vec::with_capacity(capacity * p),
        Vec::with_capacity(capacity * m),
    );
    let mut rows = 0;
    for line in lines {
        let (xr, yr) = (x.len(), y.len());
        x.resize(xr + p, 0.0);
        y.resize(yr + m, 0.0);
        if !read_csv_row(line, &columns, &mut x[xr..], &mut y[yr..])? {
            // Spreadsheets end tables with lines of empty cells.
            if line.split(',').all(|cell| cell.trim().is_empty()) {
                x.truncate(xr);
                y.truncate(yr);
                continue;
            }
            return None;
        }
        if rows == max_rows {
            return None;
        }
        rows += 1;
    }
    (rows > 0).then(|| {
        (
            Rows::from_row_major(rows, p, x),
            Rows::from_row_major(rows, m, y),
        )
    })
}

/// Reads one CSV line (its ending removed) into a row of `x` and of `y`: `Some(true)` when it
/// holds exactly one finite number per column, `Some(false)` when it does not, `None` when it
/// holds a quote or a carriage return (the csv crate reads those differently). Cells are found
/// byte by byte: they are short, and a search call per cell costs more than it saves.
fn read_csv_row(line: &str, columns: &[Column], x: &mut [f64], y: &mut [f64]) -> Option<bool> {
    let bytes = line.as_bytes();
    let mut at = 0;
    for (c, column) in columns.iter().enumerate() {
        if c > 0 {
            // Past the comma that ended the previous cell; none there: too few cells.
            if bytes.get(at) != Some(&b',') {
                return Some(false);
            }
            at += 1;
        }
        let start = at;
        let value = match decimal(bytes, at) {
            // Most cells are a number in JSON's grammar and nothing else: read where the cell
            // starts, in one pass. (Its text holds no comma, quote, space or carriage return.)
            Some(number) if matches!(bytes.get(number.end), None | Some(b',')) => {
                at = number.end;
                match number.exact {
                    Some(value) => Ok(value),
                    None => line[start..at].parse::<f64>(),
                }
            }
            _ => {
                while let Some(&byte) = bytes.get(at) {
                    match byte {
                        b',' => break,
                        b'\r' | b'"' => return None,
                        _ => at += 1,
                    }
                }
                let cell = line[start..at].trim();
                // A cell in JSON's grammar is read as the standard library reads it, without
                // its second scan; anything else the standard library reads ("+1", "1.", ".5").
                match decimal(cell.as_bytes(), 0) {
                    Some(Decimal {
                        end,
                        exact: Some(value),
                    }) if end == cell.len() => Ok(value),
                    _ => cell.parse::<f64>(),
                }
            }
        };
        match value {
            Ok(value) if value.is_finite() => match *column {
                Column::Feature(j) => x[j] = value,
                Column::Output(k) => y[k] = value,
            },
            _ => return Some(false),
        }
    }
    // More cells than columns.
    Some(at == bytes.len())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::batch::read_csv;
    use crate::domain::{Body, Details, RowField, Width, parse_rows};

    /// The slow path's reading of `body`: every field of `fields` through `parse_rows`.
    fn slow(body: &str, fields: &[(&'static str, usize)]) -> Option<Vec<Rows>> {
        let row_fields: Vec<RowField> = fields
            .iter()
            .map(|(name, width)| RowField {
                pointer: Box::leak(format!("/{name}").into_boxed_str()),
                width: Width::Exact(*width),
            })
            .collect();
        let mut body = Body::parse(body.as_bytes(), &row_fields, usize::MAX).ok()?;
        let mut details = Details::default();
        let rows = row_fields
            .iter()
            .map(|f| parse_rows(body.take_rows(f.pointer), f.pointer, &mut details))
            .collect::<Option<Vec<_>>>();
        details.is_empty().then_some(rows).flatten()
    }

    fn bits(rows: &[Rows]) -> Vec<(usize, usize, Vec<u64>)> {
        rows.iter().map(Rows::bits).collect()
    }

    #[test]
    fn eight_bytes_are_read_as_eight_digits_or_not_at_all() {
        for text in ["00000000", "12345678", "99999999", "40000001", "09876543"] {
            let word: [u8; 8] = text.as_bytes().try_into().expect("eight bytes");
            assert_eq!(eight_digits(&word), Some(text.parse().expect("digits")));
        }
        // Any byte but a digit, anywhere in the word, is refused.
        for at in 0..8 {
            for byte in (0..=255u8).filter(|b| !b.is_ascii_digit()) {
                let mut word = *b"31415926";
                word[at] = byte;
                assert_eq!(eight_digits(&word), None, "byte {byte} at {at}");
            }
        }
        assert_eq!(eight_digits(b"1234567"), None);
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for text in [
            "0",
            "-0",
            "-0.0",
            "0e5",
            "-0e-5",
            "1",
            "-1.5e+3",
            "1E2",
            "0.1",
            "0.30000000000000004",
            "0.7134346186520815",
            "123456789012345678901234567890",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "4.9e-324",
            "2.4703282292062327e-324",
            "2.2250738585072011e-308",
            "1.7976931348623157e308",
            "1e-400",
            "9007199254740993",
            "0.000000000000000000000000000001",
            // The edges of the exact path: 2⁵³, 19 digits, 10^±22, and just past each.
            "9007199254740992",
            "-9007199254740992e-22",
            "900719925474099.2",
            "9007199254740994",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "123e20",
            "0.0000000000000000001",
            "0.00000000000000000001",
            "1234567890123456789e-5",
            "1.0000000000000000000",
            "1e-99999999999999999999",
            // Eisel–Lemire (19 digits at most, past the exact path): halfway and near-halfway
            // cases, the subnormal range, the edges of the range of doubles, 19 and 20 digits.
            "9007199254740993e0",
            "9007199254740995",
            "18014398509481985",
            "9223372036854775807",
            "9999999999999999999",
            "99999999999999999999",
            "0.1000000000000000055511151231257827",
            "0.10000000000000000555",
            "2.2250738585072012e-308",
            "2.2250738585072014e-308",
            "4.9406564584124654e-324",
            "2.4703282292062328e-324",
            "1.7976931348623158e308",
            "7.2057594037927933e16",
            "1.4e-45",
            "5e-324",
            "3e-324",
            "1e308",
            "123456789012345678e-330",
            "0.13436424411240122",
            "-0.84743373693723274",
        ] {
            let body = format!("{{\"x\": [[{text}]]}}");
            let fast = fast_rows_object(body.as_bytes(), &[("x", 1)], false, usize::MAX)
                .unwrap_or_else(|| panic!("{text} not read"));
            let slow = slow(&body, &[("x", 1)]).unwrap_or_else(|| panic!("{text} refused"));
            assert_eq!(bits(&fast.rows), bits(&slow), "{text}");
        }
    }

    #[test]
    fn anything_but_the_plain_shape_is_left_to_the_full_parse() {
        let fields = [("x", 2), ("y", 1)];
        for body in [
            r#"{"x": [[1, 2]]}"#,
            r#"{"x": [[1, 2]], "y": []}"#,
            r#"{"x": [[1, 2]], "y": [[1]], "z": 1}"#,
            r#"{"x": [[1, 2]], "y": [[1]], "x": [[1, 2]]}"#,
            r#"{"\u0078": [[1, 2]], "y": [[1]]}"#,
            r#"{"x": [[1, 2, 3]], "y": [[1]]}"#,
            r#"{"x": [[1]], "y": [[1]]}"#,
            r#"{"x": [[1, "2"]], "y": [[1]]}"#,
            r#"{"x": [[1, null]], "y": [[1]]}"#,
            r#"{"x": [[1, 2],], "y": [[1]]}"#,
            r#"{"x": [[1, 2]], "y": [[1]],}"#,
            r#"{"x": [[01, 2]], "y": [[1]]}"#,
            r#"{"x": [[1., 2]], "y": [[1]]}"#,
            r#"{"x": [[.5, 2]], "y": [[1]]}"#,
            r#"{"x": [[+1, 2]], "y": [[1]]}"#,
            r#"{"x": [[1e, 2]], "y": [[1]]}"#,
            r#"{"x": [[NaN, 2]], "y": [[1]]}"#,
            r#"{"x": [[1e400, 2]], "y": [[1]]}"#,
            r#"{"x": [[1, 2]], "y": [[1]]} x"#,
            r#"{"x": [[1, 2]], "y": [[1]]"#,
            r#"{"batch_id": "a", "x": [[1, 2]], "y": [[1]]}"#,
            r#"[{"x": [[1, 2]], "y": [[1]]}]"#,
            "",
        ] {
            assert!(
                fast_rows_object(body.as_bytes(), &fields, false, usize::MAX).is_none(),
                "{body}"
            );
        }
    }

    #[test]
    fn batch_ids_are_read_when_accepted() {
        let fields = [("x", 1)];
        let read = |body: &str| fast_rows_object(body.as_bytes(), &fields, true, usize::MAX);
        assert_eq!(
            read(r#"{"batch_id":"lot-7","x":[[1]]}"#).and_then(|o| o.batch_id),
            Some("lot-7".to_owned())
        );
        assert!(read(r#"{"batch_id": null, "x": [[1]]}"#).is_some_and(|o| o.batch_id.is_none()));
        assert!(read(r#"{"x": [[1]]}"#).is_some_and(|o| o.batch_id.is_none()));
        for refused in [
            r#"{"batch_id": 7, "x": [[1]]}"#,
            r#"{"batch_id": "a\"b", "x": [[1]]}"#,
            r#"{"batch_id": "a", "batch_id": "b", "x": [[1]]}"#,
        ] {
            assert!(read(refused).is_none(), "{refused}");
        }
    }

    #[test]
    fn numbers_of_up_to_19_digits_are_read_from_the_scan_as_the_standard_library_reads_them() {
        // What instruments and scripts print (Python's `repr`: up to 17 digits) is read from the
        // scan, past 2⁵³ by Eisel–Lemire, and never scanned a second time.
        for text in [
            "0.13436424411240122",
            "-0.84743373693723274",
            "7.2057594037927933e16",
        ] {
            let read = decimal(text.as_bytes(), 0).and_then(|d| d.exact);
            assert_eq!(
                read.map(f64::to_bits),
                text.parse::<f64>().ok().map(f64::to_bits)
            );
        }
        assert!(decimal(b"99999999999999999999", 0).is_some_and(|d| d.exact.is_none()));
    }

    proptest! {
        #[test]
        fn eisel_lemire_gives_the_standard_librarys_bits_or_leaves_the_number_to_it(
            w in prop_oneof![any::<u64>(), 1u64..1_000_000, (1u64 << 53)..(1u64 << 60)],
            q in -400i64..400,
        ) {
            let w = w % 10_000_000_000_000_000_000;
            let text = format!("{w}e{q}");
            let std = text.parse::<f64>().map(f64::to_bits).ok();
            if let Some(value) = eisel_lemire(w, q) {
                prop_assert_eq!(Some(value.to_bits()), std, "{}", text);
            }
            let read = decimal(text.as_bytes(), 0).and_then(|d| d.exact);
            prop_assert!(read.is_none_or(|v| Some(v.to_bits()) == std), "{}", text);
        }
    }

    fn number_text() -> impl Strategy<Value = String> {
        let finite = any::<f64>().prop_filter("finite", |v| v.is_finite());
        // Around the edges of the exact path (`decimal`): significands near 2⁵³, powers near
        // ±22 and across the doubles' range (Eisel–Lemire), the point anywhere in the digits.
        let edge = (
            prop_oneof![
                0u64..100_000,
                (1u64 << 53) - 1000..(1u64 << 53) + 1000,
                any::<u64>()
            ],
            prop_oneof![-26i32..26, -360i32..330],
            0usize..20,
        )
            .prop_map(|(w, q, point)| {
                let digits = w.to_string();
                let point = point.min(digits.len() - 1);
                let (whole, fraction) = digits.split_at(digits.len() - point);
                if fraction.is_empty() {
                    format!("{whole}e{q}")
                } else {
                    format!("{whole}.{fraction}e{q}")
                }
            });
        prop_oneof![
            edge,
            finite.clone().prop_map(|v| format!("{v}")),
            finite.clone().prop_map(|v| format!("{v:e}")),
            finite.prop_map(|v| format!("{v:E}")),
            (any::<f64>(), 0usize..25).prop_map(|(v, d)| format!("{:.*}", d, v.clamp(-1e9, 1e9))),
            any::<i64>().prop_map(|v| v.to_string()),
            (
                "-?[1-9][0-9]{0,30}",
                "\\.[0-9]{1,30}",
                "[eE][+-]?[0-9]{1,3}"
            )
                .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
        ]
        .prop_filter("JSON number", |t| !t.contains("inf") && !t.contains("NaN"))
    }

    proptest! {
        /// Any body of the plain shape, with any whitespace, reads to the bits the full parse
        /// reads (or is left to it, for numbers that overflow).
        #[test]
        fn the_fast_path_agrees_with_the_full_parse(
            rows in prop::collection::vec(prop::collection::vec(number_text(), 3), 1..6),
            space in prop::sample::select(vec!["", " ", "\n  ", "\t", "\r\n"]),
        ) {
            let row_text: Vec<String> = rows
                .iter()
                .map(|r| format!("[{space}{}{space}]", r.join(&format!(",{space}"))))
                .collect();
            let body = format!(
                "{space}{{{space}\"x\"{space}:{space}[{}]{space}}}{space}",
                row_text.join(",")
            );
            let fast = fast_rows_object(body.as_bytes(), &[("x", 3)], false, usize::MAX);
            let slow = slow(&body, &[("x", 3)]);
            match (fast, slow) {
                (Some(fast), Some(slow)) => prop_assert_eq!(bits(&fast.rows), bits(&slow)),
                (None, None) => {}
                (Some(_), None) => prop_assert!(false, "fast path accepted what the full parse refuses: {body}"),
                (None, Some(_)) => prop_assert!(
                    body.contains('e') || body.contains('E'),
                    "fast path refused a plain body: {body}"
                ),
            }
        }
    }

    /// A spectral request's arrays are read at the first row's width, up to the bands allowed,
    /// and nothing else is taken.
    #[test]
    fn spectra_are_read_at_the_first_rows_width_up_to_the_bands_allowed() {
        let body = |values: &str| {
            format!(r#"{{"spectra": {{"start_nm": 400, "interval_nm": 10, "values": {values}}}}}"#)
        };
        let read = fast_spectra_object(body("[[1, 2, 3], [4, 5, 6]]").as_bytes(), 0, None, 3, 10)
            .expect("three bands");
        assert_eq!((read.start_nm, read.interval_nm), (400.0, 10.0));
        assert_eq!((read.values.rows(), read.values.width()), (2, 3));
        assert_eq!(read.values.values(), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(read.x.is_none());
        for refused in [
            "[[1, 2, 3, 4]]",
            "[[1, 2, 3], [4, 5]]",
            "[[1, 2, 3], [4, 5, 6, 7]]",
            "[[]]",
            "[]",
        ] {
            assert!(
                fast_spectra_object(body(refused).as_bytes(), 0, None, 3, 10).is_none(),
                "{refused}"
            );
        }
        assert!(fast_spectra_object(body("[[1, 2], [3, 4]]").as_bytes(), 0, None, 3, 1).is_none());
        let with_x = format!(r#"{{"x": [[7]], {}"#, &body("[[1, 2]]")[1..]);
        let read = fast_spectra_object(with_x.as_bytes(), 1, None, 3, 10).expect("x and spectra");
        assert_eq!(read.x.map(|x| x.values().to_vec()), Some(vec![7.0]));
        assert!(fast_spectra_object(with_x.as_bytes(), 0, None, 3, 10).is_none());
        // A batch's outputs and id are read only when outputs are asked for, and then needed.
        let batch = format!(
            r#"{{"batch_id": "b-1", "y": [[0.5]], {}"#,
            &body("[[1, 2]]")[1..]
        );
        let read = fast_spectra_object(batch.as_bytes(), 0, Some(1), 3, 10).expect("a batch");
        assert_eq!(read.y.map(|y| y.values().to_vec()), Some(vec![0.5]));
        assert_eq!(read.batch_id.as_deref(), Some("b-1"));
        assert!(fast_spectra_object(batch.as_bytes(), 0, None, 3, 10).is_none());
        assert!(fast_spectra_object(batch.as_bytes(), 0, Some(2), 3, 10).is_none());
        let null_id = format!(
            r#"{{"batch_id": null, "y": [[0.5]], {}"#,
            &body("[[1, 2]]")[1..]
        );
        let read = fast_spectra_object(null_id.as_bytes(), 0, Some(1), 3, 10).expect("no id");
        assert!(read.batch_id.is_none());
        assert!(fast_spectra_object(body("[[1, 2]]").as_bytes(), 0, Some(1), 3, 10).is_none());
    }

    /// A model with features `a`, `b` and one output `c`.
    fn csv_spec() -> ModelSpec {
        ModelSpec::parse(&serde_json::json!({
            "name": "lab", "features": ["a", "b"], "outputs": ["c"]
        }))
        .expect("a valid spec")
    }

    /// A CSV batch's feature and output rows.
    type CsvRows = (Rows, Rows);

    /// The two readings of `body`: the fast path's and the csv crate's (`None` when refused).
    fn csv_both(body: &str, max_rows: usize) -> (Option<CsvRows>, Option<CsvRows>) {
        let spec = csv_spec();
        (
            fast_csv(body.as_bytes(), &spec, max_rows),
            read_csv(body.as_bytes(), &spec, max_rows).ok(),
        )
    }

    fn csv_bits(rows: &CsvRows) -> Vec<(usize, usize, Vec<u64>)> {
        bits(&[rows.0.clone(), rows.1.clone()])
    }

    #[test]
    fn plain_csv_reads_as_the_csv_crate_reads_it() {
        for body in [
            "a,b,c\n1,2,3\n",
            "a,b,c\n1,2,3",
            "c,a,b\r\n3,1,2\r\n-0.5e-3,0.1,1E2\r\n",
            " b , a ,c\n 2 ,\t1,3\n\n,,\n  \n4,5,6\n",
            "\u{feff}a,b,c\n1,2,3\n",
            "\n\na,b,c\n1,2,3\n",
            "a,b,c\n0.30000000000000004,2.2250738585072011e-308,4.9e-324\n",
            "a,b,c\n9007199254740993,-0,123456789012345678901234567890\n",
        ] {
            let (fast, full) = csv_both(body, 100);
            let fast = fast.unwrap_or_else(|| panic!("fast path refused {body:?}"));
            let full = full.unwrap_or_else(|| panic!("csv crate refused {body:?}"));
            assert_eq!(csv_bits(&fast), csv_bits(&full), "{body:?}");
        }
        let (fast, _) = csv_both("c,a,b\n3,1,2\n", 100);
        let (x, y) = fast.expect("read");
        assert_eq!((x.values(), y.values()), (&[1.0, 2.0][..], &[3.0][..]));
    }

    #[test]
    fn csv_beyond_the_plain_shape_is_left_to_the_csv_crate() {
        for body in [
            "a,b,c\n\"1\",2,3\n",
            "a,b,c\r1,2,3\r",
            "a,b,c\n1,2,3\r4,5,6\n",
            "a,b,c\n1,\r2,3\n",
            "a,b,c\n1,2\n",
            "a,b,c\n1,2,3,4\n",
            "a,b,c\n1,2,\n",
            "a,b,c\n1,NaN,3\n",
            "a,b,c\n1,inf,3\n",
            "a,b,c\n1,1e400,3\n",
            "a,b,c\n1,x,3\n",
            "a,b\n1,2\n",
            "a,b,c,d\n1,2,3,4\n",
            "a,a,b,c\n1,1,2,3\n",
            "a,b,c\n",
            "a,b,c\n,,\n",
            "",
            "a,b,c\n1,2,3\n1,2,3\n1,2,3\n",
        ] {
            assert!(
                fast_csv(body.as_bytes(), &csv_spec(), 2).is_none(),
                "{body:?}"
            );
        }
        assert!(fast_csv(b"a,b,c\n1,\xff,3\n", &csv_spec(), 2).is_none());
    }

    fn csv_cell() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => number_text(),
            1 => Just(String::new()),
            1 => prop::sample::select(vec![" 1", "2 ", "\t3", "x", "\"4\"", "NaN", "1e999", "\r5", "\u{a0}6"])
                .prop_map(str::to_owned),
        ]
    }

    /// A line that is not a row: empty, blank, or only empty cells.
    fn csv_blank_line() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["", "  ", ",,", " , ,\t", ", \r ,", ",,,"])
            .prop_map(str::to_owned)
    }

    /// Spaces around a header name: ASCII, or Unicode (both readers trim them alike).
    fn csv_padding() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["", "", " ", "\t", "\u{a0}", "\u{3000}"])
    }

    proptest! {
        /// Whatever the fast path reads from any CSV body, the csv crate reads to the same
        /// bits; and a plain body it always reads.
        #[test]
        fn the_csv_fast_path_agrees_with_the_csv_crate(
            order in Just(vec!["a", "b", "c"]).prop_shuffle(),
            padding in prop::collection::vec((csv_padding(), csv_padding()), 3),
            bom in any::<bool>(),
            lines in prop::collection::vec(
                (
                    prop_oneof![
                        4 => prop::collection::vec(csv_cell(), 2..5).prop_map(|r| (r.join(","), Some(r))),
                        1 => csv_blank_line().prop_map(|l| (l, None)),
                    ],
                    prop::sample::select(vec!["\n", "\n", "\r\n", "\r"]),
                ),
                0..7,
            ),
            max_rows in 1usize..8,
        ) {
            let header: Vec<String> = order
                .iter()
                .zip(&padding)
                .map(|(name, (before, after))| format!("{before}{name}{after}"))
                .collect();
            let mut body = if bom { "\u{feff}".to_owned() } else { String::new() };
            body.push_str(&header.join(","));
            body.push('\n');
            for ((text, _), ending) in &lines {
                body.push_str(text);
                body.push_str(ending);
            }
            let rows: Vec<&Vec<String>> = lines.iter().filter_map(|((_, r), _)| r.as_ref()).collect();
            let plain = lines.iter().all(|((text, _), ending)| *ending != "\r" && !text.contains('\r'))
                && (1..=max_rows).contains(&rows.len())
                && rows.iter().all(|r| {
                    r.len() == 3 && r.iter().all(|c| number_text_is_plain(c))
                });
            match csv_both(&body, max_rows) {
                (Some(fast), Some(full)) => prop_assert_eq!(csv_bits(&fast), csv_bits(&full)),
                (Some(_), None) => prop_assert!(false, "fast path read what the csv crate refuses: {body:?}"),
                (None, _) => prop_assert!(!plain, "fast path refused a plain body: {body:?}"),
            }
        }
    }

    /// A cell that is a finite number with nothing around it.
    fn number_text_is_plain(cell: &str) -> bool {
        cell.trim() == cell && cell.parse::<f64>().is_ok_and(f64::is_finite)
    }
}
