//! libFuzzer entry for the `hello` target: the property is `fuzzing::target("hello")`'s check.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fuzzing::init("hello"), |data: &[u8]| {
    (fuzzing::target("hello").expect("listed in fuzzing::TARGETS").check)(data)
});
