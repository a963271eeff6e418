//! Any text as `alfredConfig`: an error or a config whose durations and windows all hold.
#![no_main]

use alfred::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::parse(text);
    }
});
