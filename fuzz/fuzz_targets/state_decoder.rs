//! A stored model state, as read back from the database: any bytes are either decoded or
//! reported as corrupt, never a panic; what decodes re-encodes (in the current format, whatever
//! format it was read from) to bytes that decode to the same state.
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
            let current = codec::encode(&state);
            let again = codec::decode(&current).expect("a state the encoder wrote decodes");
            assert_eq!(codec::encode(&again), current, "decode/encode round trip");
        }
    }
});
