//! A model specification: accepted or refused with details, never a panic; what is accepted
//! builds an estimator configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mordant::domain::ModelSpec;

fuzz_target!(|bytes: &[u8]| {
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return;
    };
    if let Ok(spec) = ModelSpec::parse(&body) {
        assert!(!spec.outputs.is_empty());
        let _ = spec.config();
    }
});
