//! A JSON batch body for a small model: accepted or refused with details, never a panic; what
//! is accepted has the model's widths and only finite numbers.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use mordant::domain::{ModelSpec, NewBatch};

static SPEC: LazyLock<ModelSpec> = LazyLock::new(|| {
    ModelSpec::parse(&serde_json::json!({
        "name": "fuzz", "features": ["R400", "R410", "R420"], "outputs": ["red", "yellow"]
    }))
    .expect("a valid spec")
});

fuzz_target!(|bytes: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    match NewBatch::parse(&body, &SPEC, None) {
        Ok(batch) => {
            assert!(batch.x.rows() > 0 && batch.x.rows() == batch.y.rows());
            assert_eq!(batch.x.width(), 3);
            assert_eq!(batch.y.width(), 2);
            assert!(batch.x.values().iter().chain(batch.y.values()).all(|v| v.is_finite()));
        }
        Err(invalid) => assert!(!invalid.details.is_empty() || !invalid.message.is_empty()),
    }
});
