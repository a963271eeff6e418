//! Any text as the `--operator-defaults` file: OME's defaults or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = alfred_webhook::lookups::defaults_from_manifest(text);
    }
});
