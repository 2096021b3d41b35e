//! libFuzzer entry for the `cluster_toml` target: the property is `fuzzing::target("cluster_toml")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("cluster_toml"), |data: &[u8]| {
    (fuzzing::target("cluster_toml").expect("listed in fuzzing::TARGETS").check)(data)
});
