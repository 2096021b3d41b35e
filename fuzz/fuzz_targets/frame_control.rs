//! libFuzzer entry for the `frame_control` target: the property is `fuzzing::target("frame_control")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_control"), |data: &[u8]| {
    (fuzzing::target("frame_control").expect("listed in fuzzing::TARGETS").check)(data)
});
