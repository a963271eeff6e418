//! Any text as a snapshot: an error or a snapshot, never a panic; a snapshot read goes through
//! a whole decision pass, and what it writes it reads back the same.
#![no_main]

use alfred::config::Config;
use alfred::model::Context;
use alfred::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(snapshot) = Snapshot::parse(text) else {
        return;
    };
    let config = Config::default();
    let now = "2026-09-28T10:15:00Z".parse().expect("a time");
    let _ = alfred::decision::decide(&Context::build(&snapshot, &config, now));
    let written = serde_json::to_string(&snapshot.to_list()).expect("a snapshot writes as JSON");
    let again = Snapshot::parse(&written).expect("what a snapshot writes, it reads");
    assert_eq!(again.object_count(), snapshot.object_count());
});
