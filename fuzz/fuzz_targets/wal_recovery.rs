//! libFuzzer entry for the `wal_recovery` target: the property is `fuzzing::target("wal_recovery")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("wal_recovery"), |data: &[u8]| {
    (fuzzing::target("wal_recovery").expect("listed in fuzzing::TARGETS").check)(data)
});
