//! libFuzzer entry for the `snapshot_install` target: the property is `fuzzing::target("snapshot_install")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("snapshot_install"), |data: &[u8]| {
    (fuzzing::target("snapshot_install").expect("listed in fuzzing::TARGETS").check)(data)
});
