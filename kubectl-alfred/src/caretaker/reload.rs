//! The configuration a caretaker runs with: `config.yaml` of its `alfred-config` ConfigMap,
//! read again whenever the ConfigMap changes. A document that does not load keeps the last good
//! one running (alfred-reference.md §1, hot reload); a process that starts with one runs the
//! built-in defaults.

use alfred::config::{CONFIG_MAP_KEY, CONFIG_MAP_NAME, Config};
use k8s_openapi::api::core::v1::ConfigMap;

/// The configuration in force and the document it was last compared with.
#[derive(Default)]
pub struct Settings {
    pub config: Config,
    /// The text last seen; None before the first look, or while the key is missing.
    seen: Option<Option<String>>,
}

/// What a look at the ConfigMap did.
#[derive(Debug, PartialEq)]
pub enum Reload {
    /// The same document as last time.
    Unchanged,
    Loaded,
    /// The document (or its absence) does not load: the first error; the last good stays.
    Failed(String),
}

impl Reload {
    /// The `outcome` label of `alfred_policy_reload_total`, when something was loaded or refused.
    pub fn outcome(&self) -> Option<&'static str> {
        match self {
            Reload::Unchanged => None,
            Reload::Loaded => Some("success"),
            Reload::Failed(_) => Some("failure"),
        }
    }

    /// The Warning event's message on the ConfigMap.
    pub fn event_message(&self) -> Option<String> {
        match self {
            Reload::Failed(why) => Some(format!(
                "{CONFIG_MAP_NAME} rejected, keeping last-known-good: {why}"
            )),
            _ => None,
        }
    }
}

impl Settings {
    /// True once the ConfigMap has been looked at (what readiness waits for).
    pub fn loaded(&self) -> bool {
        self.seen.is_some()
    }

    /// Looks at the ConfigMap as it stands (None: there is none). With no ConfigMap at all
    /// the defaults apply, as everywhere in the plugin; a ConfigMap without `config.yaml` is
    /// a document that does not load.
    pub fn observe(&mut self, map: Option<&ConfigMap>) -> Reload {
        let text: Option<String> = map.map(|m| {
            m.data
                .as_ref()
                .and_then(|d| d.get(CONFIG_MAP_KEY))
                .cloned()
                .unwrap_or_default()
        });
        let first = self.seen.is_none();
        if self.seen.as_ref() == Some(&text) {
            return Reload::Unchanged;
        }
        self.seen = Some(text.clone());
        let parsed = match &text {
            None => Ok(Config::default()),
            Some(t) if t.is_empty() && map.is_some_and(|m| !has_key(m)) => Err(format!(
                "ConfigMap {CONFIG_MAP_NAME} has no key {CONFIG_MAP_KEY}"
            )),
            Some(t) => Config::parse(t).map_err(|e| e.to_string()),
        };
        match parsed {
            Ok(config) => {
                self.config = config;
                Reload::Loaded
            }
            Err(why) => {
                if first {
                    self.config = Config::default();
                }
                Reload::Failed(why)
            }
        }
    }
}

fn has_key(map: &ConfigMap) -> bool {
    map.data
        .as_ref()
        .is_some_and(|d| d.contains_key(CONFIG_MAP_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn map(text: Option<&str>) -> ConfigMap {
        ConfigMap {
            data: text.map(|t| BTreeMap::from([(CONFIG_MAP_KEY.to_string(), t.to_string())])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_bad_document_keeps_the_last_good_one() {
        let mut s = Settings::default();
        assert!(!s.loaded());
        let good = "schemaVersion: 1\nmaxMigrationsPerHour: 4\n";
        assert_eq!(s.observe(Some(&map(Some(good)))), Reload::Loaded);
        assert_eq!(s.config.max_migrations_per_hour, 4);
        assert_eq!(s.observe(Some(&map(Some(good)))), Reload::Unchanged);
        let bad = s.observe(Some(&map(Some("schemaVersion: 2\n"))));
        assert_eq!(bad.outcome(), Some("failure"));
        assert_eq!(
            bad.event_message().unwrap(),
            "alfred-config rejected, keeping last-known-good: unsupported schemaVersion 2 (supported: 1)"
        );
        assert_eq!(
            s.config.max_migrations_per_hour, 4,
            "the last good one stays"
        );
        let missing = s.observe(Some(&map(None)));
        assert!(matches!(missing, Reload::Failed(ref w) if w.contains("no key config.yaml")));
        assert_eq!(s.config.max_migrations_per_hour, 4);
        assert_eq!(s.observe(Some(&map(Some(good)))), Reload::Loaded);
    }

    #[test]
    fn starting_on_a_bad_document_runs_the_defaults() {
        let mut s = Settings::default();
        let bad = s.observe(Some(&map(Some("maxMigrationsPerHour: -1\n"))));
        assert!(matches!(bad, Reload::Failed(_)));
        assert!(s.loaded());
        assert_eq!(
            s.config.max_migrations_per_hour,
            Config::default().max_migrations_per_hour
        );
        let mut none = Settings::default();
        assert_eq!(
            none.observe(None),
            Reload::Loaded,
            "no ConfigMap: the defaults"
        );
    }
}
