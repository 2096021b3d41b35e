//! libFuzzer entry for the `frame_group` target: the property is `fuzzing::target("frame_group")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_group"), |data: &[u8]| {
    (fuzzing::target("frame_group").expect("listed in fuzzing::TARGETS").check)(data)
});
