//! libFuzzer entry for the `frame_peer` target: the property is `fuzzing::target("frame_peer")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_peer"), |data: &[u8]| {
    (fuzzing::target("frame_peer").expect("listed in fuzzing::TARGETS").check)(data)
});
