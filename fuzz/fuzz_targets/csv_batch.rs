//! A CSV batch body: accepted or refused, never a panic; what is accepted has the model's
//! widths and only finite numbers.
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
    if let Ok(batch) = NewBatch::parse_csv(bytes, &SPEC, Some("lot-1"), 1000) {
        assert!(batch.x.rows() > 0 && batch.x.rows() == batch.y.rows());
        assert!(batch.x.rows() <= 1000);
        assert_eq!(batch.x.width(), 3);
        assert_eq!(batch.y.width(), 2);
        assert!(batch.x.values().iter().chain(batch.y.values()).all(|v| v.is_finite()));
    }
});
