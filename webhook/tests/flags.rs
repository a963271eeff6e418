//! Flags that would leave a background task dead or spinning are usage errors (exit 2).

use std::process::Command;

#[test]
fn zero_or_negative_intervals_are_usage_errors() {
    for (flag, value) in [
        ("--tls-reload-interval", "0s"),
        ("--defaults-refresh-interval", "0s"),
        ("--api-timeout", "0s"),
        ("--tls-reload-interval", "-5s"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_alfred-webhook"))
            .args(["--standalone", &format!("{flag}={value}")])
            .output()
            .expect("run alfred-webhook");
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag) && (err.contains("zero") || err.contains("negative")),
            "{err}"
        );
    }
}
