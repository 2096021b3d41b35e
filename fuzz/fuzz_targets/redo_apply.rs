//! libFuzzer entry for the `redo_apply` target: the property is `fuzzing::target("redo_apply")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("redo_apply"), |data: &[u8]| {
    (fuzzing::target("redo_apply").expect("listed in fuzzing::TARGETS").check)(data)
});
