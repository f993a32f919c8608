//! A model specification: accepted or refused with details, never a panic; what is accepted
//! builds an estimator configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mordant::domain::{Body, ModelSpec};

fuzz_target!(|bytes: &[u8]| {
    // As the API reads a body without rows: a repeated key or too many values is refused.
    let Ok(body) = Body::parse(bytes, &[], 0) else {
        return;
    };
    if let Ok(spec) = ModelSpec::parse(body.value()) {
        assert!(!spec.outputs.is_empty());
        let _ = spec.config();
    }
});
