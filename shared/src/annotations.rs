//! Alfred's workload annotations (alfred-reference.md §2), one parser each. The plan reads them
//! leniently (an invalid value is ignored and the default applies); the admission webhook reads
//! them strictly and refuses the object with the parser's message.

use crate::api::keys;
use crate::kubernetes::names;

crate::named! {
    /// How a workload's instances may be treated on preemptible nodes.
    pub enum SpotPolicy {
        Avoid = "avoid",
        Migrate = "migrate",
        Ignore = "ignore",
    }
}

/// A refused annotation value: names the annotation, the value and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key}={} is invalid: {accepted}", crate::input::quoted(.value))]
pub struct AnnotationError {
    pub key: &'static str,
    pub value: String,
    pub accepted: &'static str,
}

fn refuse<T>(key: &'static str, value: &str, accepted: &'static str) -> Result<T, AnnotationError> {
    Err(AnnotationError {
        key,
        value: value.to_string(),
        accepted,
    })
}

/// `alfred.ome.io/movable`: a boolean as Go's `strconv.ParseBool` reads it.
pub fn movable(value: &str) -> Result<bool, AnnotationError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => refuse(keys::MOVABLE, value, "use true or false"),
    }
}

/// `alfred.ome.io/priority`: a number in [0, 1].
pub fn priority(value: &str) -> Result<f64, AnnotationError> {
    match value.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => refuse(
            keys::PRIORITY,
            value,
            "use a number from 0 to 1, such as 0.8",
        ),
    }
}

/// The most minutes a Go `time.Duration` (int64 nanoseconds) holds.
const MAX_DURATION_MINUTES: i64 = i64::MAX / 60_000_000_000;

/// `alfred.ome.io/cooldown-minutes`: a base-10 whole number of 0 or more that fits in a
/// duration. An invalid value here stops every migration in execute mode (`InvalidCooldown`).
pub fn cooldown_minutes(value: &str) -> Result<i64, AnnotationError> {
    match value.parse::<i64>() {
        Ok(m) if (0..=MAX_DURATION_MINUTES).contains(&m) => Ok(m),
        _ => refuse(
            keys::COOLDOWN_MINUTES,
            value,
            "use a whole number of minutes, 0 or more (0 means no cooldown)",
        ),
    }
}

/// `alfred.ome.io/spot-policy`: avoid, migrate or ignore.
pub fn spot_policy(value: &str) -> Result<SpotPolicy, AnnotationError> {
    match SpotPolicy::parse(value) {
        Some(policy) => Ok(policy),
        None => refuse(keys::SPOT_POLICY, value, "use avoid, migrate or ignore"),
    }
}

/// `alfred.ome.io/tenant-group`: a label value.
pub fn tenant_group(value: &str) -> Result<&str, AnnotationError> {
    if names::is_label_value(value) {
        Ok(value)
    } else {
        refuse(
            keys::TENANT_GROUP,
            value,
            "use a label value: 63 characters or fewer, letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        )
    }
}

/// `ome.io/revision-history-limit`: a positive integer.
pub fn revision_history_limit(value: &str) -> Result<u32, AnnotationError> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => refuse(
            keys::REVISION_HISTORY_LIMIT,
            value,
            "use a positive whole number of revisions to keep",
        ),
    }
}

/// Checks every Alfred annotation present in strict form: every refusal, in key order.
pub fn check_alfred<'a>(
    annotations: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<AnnotationError> {
    annotations
        .into_iter()
        .filter_map(|(key, value)| {
            match key {
                keys::MOVABLE => movable(value).map(drop),
                keys::PRIORITY => priority(value).map(drop),
                keys::COOLDOWN_MINUTES => cooldown_minutes(value).map(drop),
                keys::SPOT_POLICY => spot_policy(value).map(drop),
                keys::TENANT_GROUP => tenant_group(value).map(drop),
                _ => Ok(()),
            }
            .err()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_forms() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(movable(v), Ok(true));
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(movable(v), Ok(false));
        }
        assert_eq!(
            movable("yes").unwrap_err().to_string(),
            "annotation alfred.ome.io/movable=\"yes\" is invalid: use true or false"
        );
        assert_eq!(priority("0.8"), Ok(0.8));
        assert_eq!(priority("1"), Ok(1.0));
        assert!(priority("1.5").is_err() && priority("NaN").is_err() && priority("-0.1").is_err());
        assert_eq!(cooldown_minutes("0"), Ok(0));
        assert_eq!(cooldown_minutes("+30"), Ok(30));
        assert_eq!(cooldown_minutes("153722867"), Ok(153_722_867));
        for bad in ["153722868", "-1", "1.5", "30m", "", " 5", "0x10"] {
            assert!(cooldown_minutes(bad).is_err(), "{bad:?}");
        }
        assert_eq!(spot_policy("migrate"), Ok(SpotPolicy::Migrate));
        assert!(spot_policy("Avoid").is_err());
        assert_eq!(tenant_group("team-a"), Ok("team-a"));
        assert_eq!(tenant_group(""), Ok(""));
        assert!(tenant_group("-team").is_err() && tenant_group(&"a".repeat(64)).is_err());
        assert_eq!(revision_history_limit("10"), Ok(10));
        assert!(revision_history_limit("0").is_err() && revision_history_limit("ten").is_err());
    }

    #[test]
    fn every_refusal_in_key_order() {
        let annotations = [
            (keys::COOLDOWN_MINUTES, "soon"),
            (keys::MOVABLE, "maybe"),
            (keys::OPT_OUT_REASON, "anything goes"),
        ];
        let keys: Vec<&str> = check_alfred(annotations).iter().map(|e| e.key).collect();
        assert_eq!(keys, [keys::COOLDOWN_MINUTES, keys::MOVABLE]);
        assert!(check_alfred([(keys::OPT_OUT_REASON, "free text")]).is_empty());
    }
}
