//! Stored batch statistics: decoded or reported as corrupt, never a panic. What decodes
//! re-encodes (in the current version, whatever version it was read from) to bytes that decode
//! to the same statistics, and a blob of the current version re-encodes to itself. Each input is
//! also tried with a valid checksum appended (see `state_decoder`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mordant::estimator::codec;

fuzz_target!(|bytes: &[u8]| {
    let mut sealed = bytes.to_vec();
    sealed.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    for blob in [bytes, sealed.as_slice()] {
        if let Ok(stats) = codec::decode_statistics(blob) {
            let current = codec::encode_statistics(&stats);
            let again = codec::decode_statistics(&current).expect("statistics the encoder wrote decode");
            assert_eq!(codec::encode_statistics(&again), current, "decode/encode round trip");
            if blob[4..6] == current[4..6] {
                assert_eq!(current, blob, "the current version re-encodes to itself");
            }
        }
    }
});
