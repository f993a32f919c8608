//! A JSON batch body for a small model: accepted or refused with details, never a panic; what
//! is accepted has the model's widths, at most the row limit and only finite numbers; and what
//! the fast path accepts, the full parse accepts with the same bits.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use mordant::domain::{Body, ModelSpec, NewBatch, row_fields};

static SPEC: LazyLock<ModelSpec> = LazyLock::new(|| {
    ModelSpec::parse(&serde_json::json!({
        "name": "fuzz", "features": ["R400", "R410", "R420"], "outputs": ["red", "yellow"]
    }))
    .expect("a valid spec")
});

/// Small, so that the fuzzer reaches the limit.
const MAX_ROWS: usize = 8;

fuzz_target!(|bytes: &[u8]| {
    let fast = NewBatch::parse_fast(bytes, &SPEC, Some("lot-1"), MAX_ROWS);
    // Malformed JSON, a repeated key, too many rows or values: refused before any checking.
    let Ok(body) = Body::parse(bytes, &row_fields(&SPEC), MAX_ROWS) else {
        assert!(fast.is_none(), "the fast path accepted what the full parse refuses");
        return;
    };
    match NewBatch::parse(body, &SPEC, Some("lot-1")) {
        Ok(batch) => {
            assert!(batch.x.rows() > 0 && batch.x.rows() == batch.y.rows());
            assert!(batch.x.rows() <= MAX_ROWS);
            assert_eq!(batch.x.width(), 3);
            assert_eq!(batch.y.width(), 2);
            assert!(batch.x.values().iter().chain(batch.y.values()).all(|v| v.is_finite()));
            if let Some(fast) = fast {
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(fast.x.values()), bits(batch.x.values()));
                assert_eq!(bits(fast.y.values()), bits(batch.y.values()));
                assert_eq!(fast.batch_id, batch.batch_id);
            }
        }
        Err(invalid) => {
            assert!(!invalid.details.is_empty() || !invalid.message.is_empty());
            assert!(fast.is_none(), "the fast path accepted an invalid batch");
        }
    }
});
