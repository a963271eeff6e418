//! Kubernetes name rules (apimachinery validation), used wherever the spec asks for them.

/// A DNS-1123 label: at most 63 lowercase alphanumerics or '-', starting and ending alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: at most 253 characters of dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A qualified name (label keys, condition types): an optional DNS subdomain prefix and '/', then
/// a name of at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let name = match s.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns1123_subdomain(prefix) {
                return false;
            }
            name
        }
        None => s,
    };
    is_label_name(name)
}

fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A label value: empty, or a label name.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules() {
        assert!(is_dns1123_label("gpu-node-1"));
        assert!(!is_dns1123_label("Gpu"));
        assert!(!is_dns1123_label("-a"));
        assert!(is_dns1123_subdomain("node.example.com"));
        assert!(!is_dns1123_subdomain("node..com"));
        assert!(is_qualified_name("GpuUnhealthy"));
        assert!(is_qualified_name("maintenance.example.com/state"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("-bad"));
        assert!(is_label_value(""));
        assert!(is_label_value("team-a"));
        assert!(!is_label_value("team a"));
    }
}
