//! libFuzzer entry for the `log_base_install` target: the property is `fuzzing::target("log_base_install")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("log_base_install"), |data: &[u8]| {
    (fuzzing::target("log_base_install").expect("listed in fuzzing::TARGETS").check)(data)
});
