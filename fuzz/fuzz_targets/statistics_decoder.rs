//! Stored batch statistics: decoded or reported as corrupt, never a panic. Each input is also
//! tried with a valid checksum appended (see `state_decoder`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mordant::estimator::codec;

fuzz_target!(|bytes: &[u8]| {
    let mut sealed = bytes.to_vec();
    sealed.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    for blob in [bytes, sealed.as_slice()] {
        if let Ok(stats) = codec::decode_statistics(blob) {
            assert_eq!(codec::encode_statistics(&stats), blob, "decode/encode round trip");
        }
    }
});
