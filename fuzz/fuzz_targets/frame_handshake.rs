//! libFuzzer entry for the `frame_handshake` target: the property is `fuzzing::target("frame_handshake")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_handshake"), |data: &[u8]| {
    (fuzzing::target("frame_handshake").expect("listed in fuzzing::TARGETS").check)(data)
});
