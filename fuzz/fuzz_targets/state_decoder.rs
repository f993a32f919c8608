//! A stored model state, as read back from the database: any bytes are either decoded or
//! reported as corrupt, never a panic; what decodes re-encodes to the same bytes.
//!
//! Random bytes almost never carry a valid CRC-32, so each input is tried twice: as it is, and
//! with the checksum the encoder would append, which lets the fuzzer reach the parser behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mordant::estimator::codec;

fuzz_target!(|bytes: &[u8]| {
    let mut sealed = bytes.to_vec();
    sealed.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    for blob in [bytes, sealed.as_slice()] {
        if let Ok(state) = codec::decode(blob) {
            assert_eq!(codec::encode(&state), blob, "decode/encode round trip");
        }
    }
});
