//! libFuzzer entry for the `frame_tool` target: the property is `fuzzing::target("frame_tool")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("frame_tool"), |data: &[u8]| {
    (fuzzing::target("frame_tool").expect("listed in fuzzing::TARGETS").check)(data)
});
