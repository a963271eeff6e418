//! Prometheus metrics through the Prometheus project's client (`prometheus-client`), served in
//! the OpenMetrics text format. The review path runs at tens of thousands of requests a second:
//! every series is made at start and the path holds a handle on each, so it never looks a
//! series up; a counter is one atomic, a histogram observation a mutex held for a few
//! nanoseconds (measured in `benches/review.rs`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::review::{Hook, ReviewOutcome};

/// What `/metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const HOOKS: [Hook; 2] = [Hook::Validate, Hook::Mutate];
const KINDS: [&str; 5] = [
    "InferenceService",
    "ServingRuntime",
    "ClusterServingRuntime",
    "InferenceReplica",
    "other",
];
const OUTCOMES: [ReviewOutcome; 3] = [
    ReviewOutcome::Allowed,
    ReviewOutcome::Patched,
    ReviewOutcome::Denied,
];
/// Upper bounds in seconds; admission budgets are milliseconds, the API server's timeout seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// Events counted by name; `EVENTS` lists them in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A body that is not an AdmissionReview v1 (answered 400).
    BadRequest,
    /// A body too large, too slow or past the shared budget (413, 408, 503).
    BodyRefused,
    TlsReloaded,
    TlsReloadFailed,
    DefaultsRead,
    DefaultsReadFailed,
    RuntimeCacheHit,
    RuntimeLookup,
    RuntimeLookupFailed,
    WatchFailed,
    Registered,
    RegistrationFailed,
}

const EVENTS: [(Event, &str, &str); 12] = [
    (
        Event::BadRequest,
        "alfred_webhook_bad_requests_total",
        "Bodies that were not an AdmissionReview v1.",
    ),
    (
        Event::BodyRefused,
        "alfred_webhook_bodies_refused_total",
        "Review bodies not read: too large, too slow, or past the budget for large bodies.",
    ),
    (
        Event::TlsReloaded,
        "alfred_webhook_tls_reloads_total",
        "Serving certificates loaded after a change on disk.",
    ),
    (
        Event::TlsReloadFailed,
        "alfred_webhook_tls_reload_failures_total",
        "Changed certificate files that could not be loaded (the previous certificate stays).",
    ),
    (
        Event::DefaultsRead,
        "alfred_webhook_operator_defaults_reads_total",
        "Reads of OME's operator defaults that changed or confirmed them.",
    ),
    (
        Event::DefaultsReadFailed,
        "alfred_webhook_operator_defaults_read_failures_total",
        "Reads of OME's operator defaults that failed (the last good value stays).",
    ),
    (
        Event::RuntimeCacheHit,
        "alfred_webhook_runtime_cache_hits_total",
        "Runtime lookups answered from the cache.",
    ),
    (
        Event::RuntimeLookup,
        "alfred_webhook_runtime_api_reads_total",
        "Runtime lookups read from the API server.",
    ),
    (
        Event::RuntimeLookupFailed,
        "alfred_webhook_runtime_api_read_failures_total",
        "Runtime lookups that failed (the object is admitted without defaults).",
    ),
    (
        Event::WatchFailed,
        "alfred_webhook_watch_failures_total",
        "Failed watches of InferenceServices, runtimes or OME's defaults (retried with backoff).",
    ),
    (
        Event::Registered,
        "alfred_webhook_registrations_total",
        "Applies of the webhook's own configurations (--register).",
    ),
    (
        Event::RegistrationFailed,
        "alfred_webhook_registration_failures_total",
        "Applies of the webhook's own configurations that failed (retried).",
    ),
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    hook: &'static str,
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabel {
    hook: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Per hook, kind and outcome, in the order of the three lists.
    reviews: Vec<Counter>,
    /// Per hook.
    latency: Vec<Histogram>,
    /// In `EVENTS` order.
    events: Vec<Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reviews_family = Family::<ReviewLabels, Counter>::default();
        let reviews = HOOKS
            .iter()
            .flat_map(|hook| KINDS.iter().map(move |kind| (hook, kind)))
            .flat_map(|(hook, kind)| OUTCOMES.iter().map(move |outcome| (hook, kind, outcome)))
            .map(|(hook, kind, outcome)| {
                reviews_family
                    .get_or_create(&ReviewLabels {
                        hook: hook.as_str(),
                        kind,
                        outcome: outcome.as_str(),
                    })
                    .clone()
            })
            .collect();
        registry.register(
            "alfred_webhook_reviews",
            "AdmissionReviews answered, by hook, kind and outcome",
            reviews_family,
        );
        let latency_family =
            Family::<HookLabel, Histogram>::new_with_constructor(|| Histogram::new(BUCKETS));
        let latency = HOOKS
            .iter()
            .map(|hook| {
                latency_family
                    .get_or_create(&HookLabel {
                        hook: hook.as_str(),
                    })
                    .clone()
            })
            .collect();
        registry.register(
            "alfred_webhook_review_duration_seconds",
            "Time to answer a review, including runtime lookups",
            latency_family,
        );
        let events = EVENTS
            .iter()
            .map(|(_, name, help)| {
                let counter = Counter::default();
                let name = name.strip_suffix("_total").unwrap_or(name);
                registry.register(name, help.trim_end_matches('.'), counter.clone());
                counter
            })
            .collect();
        Metrics {
            registry,
            reviews,
            latency,
            events,
        }
    }
}

fn hook_index(hook: Hook) -> usize {
    HOOKS.iter().position(|h| *h == hook).unwrap_or(0)
}

impl Metrics {
    pub fn review(&self, hook: Hook, kind: &str, outcome: ReviewOutcome, took: Duration) {
        let h = hook_index(hook);
        let k = KINDS
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(KINDS.len() - 1);
        let o = OUTCOMES.iter().position(|x| *x == outcome).unwrap_or(0);
        self.reviews[(h * KINDS.len() + k) * OUTCOMES.len() + o].inc();
        self.latency[h].observe(took.as_secs_f64());
    }

    pub fn event(&self, event: Event) {
        self.events[event as usize].inc();
    }

    /// The OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_and_latency_are_counted_where_they_belong() {
        let m = Metrics::default();
        m.review(
            Hook::Mutate,
            "InferenceReplica",
            ReviewOutcome::Patched,
            Duration::from_micros(300),
        );
        m.review(
            Hook::Validate,
            "Pod",
            ReviewOutcome::Denied,
            Duration::from_secs(3),
        );
        m.event(Event::TlsReloaded);
        let text = m.render();
        assert!(text.contains(
            "alfred_webhook_reviews_total{hook=\"mutate\",kind=\"InferenceReplica\",outcome=\"patched\"} 1\n"
        ));
        assert!(text.contains(
            "alfred_webhook_reviews_total{hook=\"validate\",kind=\"other\",outcome=\"denied\"} 1\n"
        ));
        // 300 µs falls in the 0.0005 bucket and every bucket above it.
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{le=\"0.00025\",hook=\"mutate\"} 0\n"
        ));
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{le=\"0.0005\",hook=\"mutate\"} 1\n"
        ));
        // 3 s is only in +Inf.
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{le=\"1.0\",hook=\"validate\"} 0\n"
        ));
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{le=\"+Inf\",hook=\"validate\"} 1\n"
        ));
        assert!(text.contains("alfred_webhook_tls_reloads_total 1\n"));
        assert!(text.contains("# TYPE alfred_webhook_tls_reloads counter\n"));
        assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    }

    #[test]
    fn events_are_listed_in_their_enum_order() {
        for (i, (event, ..)) in EVENTS.iter().enumerate() {
            assert_eq!(*event as usize, i);
        }
    }
}
