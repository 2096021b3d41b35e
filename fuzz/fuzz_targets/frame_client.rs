//! libFuzzer entry for the `frame_client` target: the property is `fuzzing::target("frame_client")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_client"), |data: &[u8]| {
    (fuzzing::target("frame_client").expect("listed in fuzzing::TARGETS").check)(data)
});
