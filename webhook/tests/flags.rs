//! Flags that would leave a background task dead or spinning are usage errors (exit 2).

use std::process::Command;

#[test]
fn zero_or_negative_intervals_are_usage_errors() {
    for (flag, value) in [
        ("--tls-reload-interval", "0s"),
        ("--defaults-refresh-interval", "0s"),
        ("--api-timeout", "0s"),
        ("--tls-reload-interval", "-5s"),
        ("--header-timeout", "0s"),
        ("--body-timeout", "0s"),
        ("--idle-timeout", "0s"),
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

#[test]
fn zero_caps_are_usage_errors() {
    for flag in [
        "--max-connections",
        "--max-body-bytes",
        "--large-body-budget-bytes",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_alfred-webhook"))
            .args(["--standalone", &format!("{flag}=0")])
            .output()
            .expect("run alfred-webhook");
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{err}");
    }
}

/// The `--operator-defaults` file is read with the bounds every reader has.
#[test]
fn the_operator_defaults_file_is_read_within_the_bounds() {
    use alfred_webhook::lookups::defaults_from_manifest;
    let bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: inferenceservice-config}}\nx: &a \"{}\"\ndata: [{}]\n",
        "x".repeat(1 << 20),
        vec!["*a"; 5000].join(",")
    );
    let e = defaults_from_manifest(&bomb).unwrap_err().to_string();
    assert!(e.contains("aliases expand"), "{e}");
    let twice = "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata: {name: c}\n";
    assert!(
        defaults_from_manifest(twice)
            .unwrap_err()
            .to_string()
            .contains("appears twice")
    );
    let chart = include_str!("../../manifests/webhook/inferenceservice-config.example.yaml");
    assert!(defaults_from_manifest(chart).is_ok());
}
