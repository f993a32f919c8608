//! The estimator's errors: one type, and why a stored state did not decode.

/// Errors of the estimator. Each names what was wrong so the caller can report it.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum EstimatorError {
    #[error("wrong number of {what}: expected {expected}, found {found}")]
    Dimension {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{0} would not be finite")]
    NonFinite(&'static str),
    /// Inputs are finite by the time they reach the estimator: what breaks the factorisation is
    /// the rows' sums of squares running out of a double's digits, or out of its range below
    /// (values of about 10⁻¹⁵⁵, whose squares are subnormal).
    #[error(
        "the scaled posterior precision is not positive definite: the rows' sums of squares \
         are beyond double precision (values far from zero that vary very little, of very \
         different sizes, or so small that their squares fall below a double's range?)"
    )]
    NotPositiveDefinite,
    #[error("the model has no posterior yet")]
    Untrained,
    /// Rows given as a fit's own whose sums are not its statistics' (another batch, rows lost).
    #[error("the rows are not those the statistics were summed from")]
    NotTheRows,
    #[error("recipe matching is not available: {0}")]
    NoForwardMap(&'static str),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Why a blob could not be decoded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("not a mordant model state (bad magic bytes)")]
    BadMagic,
    #[error(
        "model state format version {found} is not supported (this build reads versions 1 to {newest})"
    )]
    UnsupportedVersion { found: u16, newest: u16 },
    #[error("model state is truncated")]
    Truncated,
    #[error("model state checksum mismatch (corrupt blob)")]
    Checksum,
    #[error("model state is invalid: {0}")]
    Invalid(&'static str),
}
