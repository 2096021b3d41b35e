//! libFuzzer entry for the `tpcc_engines` target: the property is `fuzzing::target("tpcc_engines")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("tpcc_engines"), |data: &[u8]| {
    (fuzzing::target("tpcc_engines").expect("listed in fuzzing::TARGETS").check)(data)
});
