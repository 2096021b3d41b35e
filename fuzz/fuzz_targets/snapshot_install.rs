//! libFuzzer entry for the `snapshot_install` target: the property is `fuzzing::target("snapshot_install")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (fuzzing::target("snapshot_install").expect("listed in fuzzing::TARGETS").check)(data)
});
