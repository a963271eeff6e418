//! Prometheus metrics in the text exposition format, on lock-free counters: the review path
//! runs at tens of thousands of requests a second and must not contend on a lock.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::review::{Hook, ReviewOutcome};

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

pub struct Metrics {
    reviews: [AtomicU64; HOOKS.len() * KINDS.len() * OUTCOMES.len()],
    /// Per hook: one counter per bucket, then +Inf.
    latency: [[AtomicU64; BUCKETS.len() + 1]; HOOKS.len()],
    latency_sum_micros: [AtomicU64; HOOKS.len()],
    events: [AtomicU64; EVENTS.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reviews: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            latency_sum_micros: std::array::from_fn(|_| AtomicU64::new(0)),
            events: std::array::from_fn(|_| AtomicU64::new(0)),
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
        self.reviews[(h * KINDS.len() + k) * OUTCOMES.len() + o].fetch_add(1, Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.latency[h][bucket].fetch_add(1, Relaxed);
        self.latency_sum_micros[h].fetch_add(took.as_micros() as u64, Relaxed);
    }

    pub fn event(&self, event: Event) {
        self.events[event as usize].fetch_add(1, Relaxed);
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP alfred_webhook_reviews_total AdmissionReviews answered, by hook, kind and outcome.\n# TYPE alfred_webhook_reviews_total counter\n");
        for (h, hook) in HOOKS.iter().enumerate() {
            for (k, kind) in KINDS.iter().enumerate() {
                for (o, outcome) in OUTCOMES.iter().enumerate() {
                    let n = self.reviews[(h * KINDS.len() + k) * OUTCOMES.len() + o].load(Relaxed);
                    let _ = writeln!(
                        out,
                        "alfred_webhook_reviews_total{{hook=\"{}\",kind=\"{kind}\",outcome=\"{}\"}} {n}",
                        hook.as_str(),
                        outcome.as_str()
                    );
                }
            }
        }
        out.push_str("# HELP alfred_webhook_review_duration_seconds Time to answer a review, including runtime lookups.\n# TYPE alfred_webhook_review_duration_seconds histogram\n");
        for (h, hook) in HOOKS.iter().enumerate() {
            let hook = hook.as_str();
            let mut cumulative = 0;
            for (i, upper) in BUCKETS
                .iter()
                .map(|b| b.to_string())
                .chain(["+Inf".into()])
                .enumerate()
            {
                cumulative += self.latency[h][i].load(Relaxed);
                let _ = writeln!(
                    out,
                    "alfred_webhook_review_duration_seconds_bucket{{hook=\"{hook}\",le=\"{upper}\"}} {cumulative}"
                );
            }
            let sum = self.latency_sum_micros[h].load(Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "alfred_webhook_review_duration_seconds_sum{{hook=\"{hook}\"}} {sum}\nalfred_webhook_review_duration_seconds_count{{hook=\"{hook}\"}} {cumulative}"
            );
        }
        for (i, (_, name, help)) in EVENTS.iter().enumerate() {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                self.events[i].load(Relaxed)
            );
        }
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
            "alfred_webhook_review_duration_seconds_bucket{hook=\"mutate\",le=\"0.00025\"} 0\n"
        ));
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{hook=\"mutate\",le=\"0.0005\"} 1\n"
        ));
        // 3 s is only in +Inf.
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{hook=\"validate\",le=\"1\"} 0\n"
        ));
        assert!(text.contains(
            "alfred_webhook_review_duration_seconds_bucket{hook=\"validate\",le=\"+Inf\"} 1\n"
        ));
        assert!(text.contains("alfred_webhook_tls_reloads_total 1\n"));
    }

    #[test]
    fn events_are_listed_in_their_enum_order() {
        for (i, (event, ..)) in EVENTS.iter().enumerate() {
            assert_eq!(*event as usize, i);
        }
    }
}
