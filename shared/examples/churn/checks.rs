//! What each migration request breaks, judged from the outside: from what the API server and
//! OME record (when a request appeared and ended, where the Instance ran and when it started,
//! the room on the target), never from Alfred's journal or its own counts. Kept apart from
//! the replay so that recorded sequences holding each kind of violation test it: a zero it
//! reports then means something.

use std::collections::{BTreeMap, BTreeSet};

const HOUR: u64 = 3_600_000;

/// The bounds a request must keep, as the configuration sets them (times in milliseconds).
#[derive(Clone, Debug)]
pub struct Bounds {
    pub in_flight: usize,
    pub per_hour: usize,
    pub workload_cooldown: u64,
    pub node_cooldown: u64,
    pub placement_cooldown: u64,
    /// `healthCooldownFloorMinutes`: a move off an Unhealthy node keeps it instead of the
    /// workload and placement cooldowns, and skips the cooldown of the node it leaves.
    pub health_floor: u64,
}

impl Bounds {
    /// The bounds Alfred's configuration sets.
    pub fn of(config: &alfred::config::Config) -> Bounds {
        let minutes = |m: i64| m.max(0) as u64 * 60_000;
        Bounds {
            in_flight: config.max_in_flight_migrations as usize,
            per_hour: config.max_migrations_per_hour as usize,
            workload_cooldown: minutes(config.per_workload_cooldown_minutes),
            node_cooldown: minutes(config.per_node_cooldown_minutes),
            placement_cooldown: minutes(config.recent_placement_cooldown_minutes),
            health_floor: minutes(config.node_health.health_cooldown_floor_minutes),
        }
    }
}

/// A request as it appeared on its InferenceService.
#[derive(Clone, Debug)]
pub struct Request {
    pub at: u64,
    pub uuid: String,
    /// The workload (an index the caller keeps), the node it names as the source, the first
    /// target it hints (None when the request names none, or a node that does not exist).
    pub workload: usize,
    pub from: Option<usize>,
    pub target: Option<usize>,
    /// A move off an Unhealthy node (reason NodeUnhealthy).
    pub health: bool,
}

/// The cluster as a fresh read showed it when the request appeared.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The node the workload's Instance ran on, and whether a migration of it was under way.
    pub on: Option<usize>,
    pub migrating: bool,
    /// Whether the hinted target had room for it.
    pub target_room: bool,
    /// When OME last ended a migration of the workload, and how long its pod had run.
    pub migration_ended: Option<u64>,
    pub ran_for: u64,
    /// The nodes the Instance left, and when.
    pub left: Vec<(usize, u64)>,
}

/// What one request broke.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The first bound it broke: inFlight, perHour, workloadCooldown, nodeCooldown,
    /// placementCooldown.
    pub cap: Option<&'static str>,
    /// A fresh read would have refused it: the Instance not on its source, busy, or the
    /// target without room.
    pub stale: bool,
    /// It moves an Instance that moved within the hour, or back to a node it left within a day.
    pub bounce_back: bool,
    /// Its UUID was sent before, or its workload had a request in flight.
    pub twice: bool,
}

struct Sent {
    at: u64,
    workload: usize,
    from: Option<usize>,
    target: Option<usize>,
    health: bool,
    ended: Option<u64>,
}

/// How many requests broke what.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub cap_violations: usize,
    /// Which bound each violation broke (the first that applies).
    pub violated: BTreeMap<&'static str, usize>,
    pub stale_sends: usize,
    pub bounce_backs: usize,
    pub sent_twice: usize,
}

/// The requests seen so far, and the counts of what they broke.
pub struct SendChecks {
    bounds: Bounds,
    sent: Vec<Sent>,
    uuids: BTreeSet<String>,
    pub counts: Counts,
}

impl SendChecks {
    pub fn new(bounds: Bounds) -> SendChecks {
        SendChecks {
            bounds,
            sent: Vec::new(),
            uuids: BTreeSet::new(),
            counts: Counts::default(),
        }
    }

    /// Judges a request that appeared, counts what it broke, and keeps it as in flight.
    pub fn send(&mut self, r: &Request, seen: &Seen) -> Verdict {
        let b = &self.bounds;
        let now = r.at;
        // Records read from a cluster may come a little out of order: never below zero.
        let since = |t: u64| now.saturating_sub(t);
        let in_flight = self.sent.iter().filter(|s| s.ended.is_none()).count();
        let last_hour = self.sent.iter().filter(|s| since(s.at) < HOUR).count();
        // The workload cooldown runs from the end of a migration OME ran, whoever asked; a
        // health move keeps the floor instead (alfred-policies.md, Cooldowns).
        let (workload_cooldown, placement_cooldown) = if r.health {
            (b.health_floor, b.health_floor)
        } else {
            (b.workload_cooldown, b.placement_cooldown)
        };
        let workload_cooling = seen
            .migration_ended
            .is_some_and(|e| since(e / 1000 * 1000) < workload_cooldown);
        // A node cools after a move onto it, or off it unless that was a health move; a health
        // move does not wait for the node it leaves.
        let cools = |n: Option<usize>| {
            n.is_some()
                && self.sent.iter().any(|s| {
                    since(s.at) < b.node_cooldown && (s.target == n || (s.from == n && !s.health))
                })
        };
        let node_cooling = cools(r.target) || (!r.health && cools(r.from));
        let placed_recently = seen.ran_for < placement_cooldown;
        let broken = [
            ("inFlight", in_flight + 1 > b.in_flight),
            ("perHour", last_hour + 1 > b.per_hour),
            ("workloadCooldown", workload_cooling),
            ("nodeCooldown", node_cooling),
            ("placementCooldown", placed_recently),
        ];
        let cap = broken.iter().find(|(_, broken)| *broken).map(|(b, _)| *b);
        let stale = r.from.is_none()
            || seen.on != r.from
            || seen.migrating
            || r.target.is_none()
            || !seen.target_room;
        // A request retried after one that failed is not a move again: the Instance never left.
        let moved_lately = seen.left.last().is_some_and(|&(_, at)| since(at) < HOUR);
        let back = r.target.is_some_and(|t| {
            seen.left
                .iter()
                .any(|&(n, at)| n == t && since(at) < 24 * HOUR)
        });
        let open = self
            .sent
            .iter()
            .any(|s| s.workload == r.workload && s.ended.is_none());
        let verdict = Verdict {
            cap,
            stale,
            bounce_back: moved_lately || back,
            twice: !self.uuids.insert(r.uuid.clone()) || open,
        };
        let counts = &mut self.counts;
        if let Some(bound) = verdict.cap {
            counts.cap_violations += 1;
            *counts.violated.entry(bound).or_default() += 1;
        }
        counts.stale_sends += usize::from(verdict.stale);
        counts.bounce_backs += usize::from(verdict.bounce_back);
        counts.sent_twice += usize::from(verdict.twice);
        self.sent.push(Sent {
            at: now,
            workload: r.workload,
            from: r.from,
            target: r.target,
            health: r.health,
            ended: None,
        });
        verdict
    }

    /// The workload's request in flight ended (its migration ran to an end, or the request
    /// was taken away) at `at`.
    pub fn end(&mut self, workload: usize, at: u64) {
        let open = self.sent.iter_mut().rev().find(|s| s.workload == workload);
        if let Some(s) = open.filter(|s| s.ended.is_none()) {
            s.ended = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;

    fn bounds() -> Bounds {
        Bounds {
            in_flight: 1,
            per_hour: 2,
            workload_cooldown: 60 * MINUTE,
            node_cooldown: 10 * MINUTE,
            placement_cooldown: 30 * MINUTE,
            health_floor: 5 * MINUTE,
        }
    }

    /// Workload `w` on node `w`, its pod running for a day, moving to node 100 + w, which has
    /// room.
    fn request(at: u64, w: usize) -> (Request, Seen) {
        let r = Request {
            at,
            uuid: format!("u-{w}-{at}"),
            workload: w,
            from: Some(w),
            target: Some(100 + w),
            health: false,
        };
        let seen = Seen {
            on: Some(w),
            target_room: true,
            ran_for: DAY,
            ..Seen::default()
        };
        (r, seen)
    }

    const DAY: u64 = 24 * HOUR;

    /// Sends each (request, seen) in order, ending each workload's request `ends` after it.
    fn run(sends: &[(Request, Seen)], ends: Option<u64>) -> (SendChecks, Vec<Verdict>) {
        let mut checks = SendChecks::new(bounds());
        let mut verdicts = Vec::new();
        for (r, seen) in sends {
            verdicts.push(checks.send(r, seen));
            if let Some(after) = ends {
                checks.end(r.workload, r.at + after);
            }
        }
        (checks, verdicts)
    }

    #[test]
    fn requests_within_every_bound_count_nothing() {
        // Six requests 40 minutes apart, each ended 5 minutes after it was sent.
        let sends: Vec<_> = (0..6)
            .map(|k| request(DAY + k * 40 * MINUTE, k as usize))
            .collect();
        let (checks, verdicts) = run(&sends, Some(5 * MINUTE));
        assert!(
            verdicts.iter().all(|v| *v == Verdict::default()),
            "{verdicts:?}"
        );
        assert_eq!(
            (
                checks.counts.cap_violations,
                checks.counts.stale_sends,
                checks.counts.bounce_backs,
                checks.counts.sent_twice
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn each_bound_broken_is_counted_by_name() {
        // A second request while the first is in flight.
        let (checks, v) = run(&[request(DAY, 1), request(DAY + MINUTE, 2)], None);
        assert_eq!(v[1].cap, Some("inFlight"));
        assert_eq!(checks.counts.violated.get("inFlight"), Some(&1));
        // A third within the hour, each ended at once (the hour holds two).
        let sends = [
            request(DAY, 1),
            request(DAY + 20 * MINUTE, 2),
            request(DAY + 40 * MINUTE, 3),
        ];
        let (checks, v) = run(&sends, Some(0));
        assert_eq!((v[1].cap, v[2].cap), (None, Some("perHour")));
        assert_eq!(checks.counts.cap_violations, 1);
        // The workload's last migration ended 30 minutes ago (cooldown 60).
        let (r, mut seen) = request(DAY, 1);
        seen.migration_ended = Some(DAY - 30 * MINUTE);
        assert_eq!(run(&[(r, seen)], None).1[0].cap, Some("workloadCooldown"));
        // A request from the node another one left 5 minutes ago (cooldown 10).
        let (r2, mut seen2) = request(DAY + 5 * MINUTE, 2);
        let r2 = Request {
            from: Some(1),
            ..r2
        };
        seen2.on = Some(1);
        let (_, v) = run(&[request(DAY, 1), (r2, seen2)], Some(0));
        assert_eq!(v[1].cap, Some("nodeCooldown"));
        // Its pod started 10 minutes ago (cooldown 30).
        let (r, mut seen) = request(DAY, 1);
        seen.ran_for = 10 * MINUTE;
        assert_eq!(run(&[(r, seen)], None).1[0].cap, Some("placementCooldown"));
    }

    #[test]
    fn a_move_off_an_unhealthy_node_keeps_the_floor_and_may_leave_a_cooling_node() {
        let health = |at: u64, w: usize, from: usize, target: usize| {
            let (r, mut seen) = request(at, w);
            seen.on = Some(from);
            let r = Request {
                from: Some(from),
                target: Some(target),
                health: true,
                ..r
            };
            (r, seen)
        };
        // Two health moves off node 1, a minute apart (node cooldown 10): the second does not
        // wait for the node it leaves.
        let sends = [health(DAY, 1, 1, 101), health(DAY + MINUTE, 2, 1, 102)];
        let (checks, v) = run(&sends, Some(0));
        assert_eq!(checks.counts.cap_violations, 0, "{v:?}");
        // A health move onto a node a move landed on a minute ago waits like any other.
        let sends = [health(DAY, 1, 1, 101), health(DAY + MINUTE, 2, 2, 101)];
        assert_eq!(run(&sends, Some(0)).1[1].cap, Some("nodeCooldown"));
        // A plain move off node 1 a minute after a health move left it: node 1 is not cooling.
        let (plain, seen) = request(DAY + MINUTE, 1);
        let plain = Request {
            from: Some(1),
            ..plain
        };
        let seen = Seen {
            on: Some(1),
            ..seen
        };
        assert_eq!(
            run(&[health(DAY, 2, 1, 102), (plain, seen)], Some(0)).1[1].cap,
            None
        );
        // The floor (5 minutes) replaces the workload (60) and placement (30) cooldowns.
        let (r, mut seen) = health(DAY, 1, 1, 101);
        seen.migration_ended = Some(DAY - 10 * MINUTE);
        seen.ran_for = 10 * MINUTE;
        assert_eq!(run(&[(r.clone(), seen.clone())], None).1[0].cap, None);
        seen.ran_for = 4 * MINUTE;
        assert_eq!(run(&[(r, seen)], None).1[0].cap, Some("placementCooldown"));
    }

    #[test]
    fn a_request_a_fresh_read_would_refuse_is_stale() {
        let stale = |edit: &dyn Fn(&mut Request, &mut Seen)| {
            let (mut r, mut seen) = request(DAY, 1);
            edit(&mut r, &mut seen);
            let (checks, v) = run(&[(r, seen)], None);
            (v[0].stale, checks.counts.stale_sends)
        };
        assert_eq!(stale(&|_, _| {}), (false, 0));
        assert_eq!(
            stale(&|_, s| s.on = Some(7)),
            (true, 1),
            "not on its source"
        );
        assert_eq!(stale(&|_, s| s.migrating = true), (true, 1), "busy");
        assert_eq!(stale(&|_, s| s.target_room = false), (true, 1), "no room");
        assert_eq!(stale(&|r, _| r.target = None), (true, 1), "no target");
        assert_eq!(stale(&|r, _| r.from = None), (true, 1), "no source");
    }

    #[test]
    fn moving_again_within_the_hour_or_back_within_a_day_bounces() {
        let bounce = |left: Vec<(usize, u64)>| {
            let (r, mut seen) = request(DAY * 2, 1);
            seen.left = left;
            let (checks, v) = run(&[(r, seen)], None);
            (v[0].bounce_back, checks.counts.bounce_backs)
        };
        assert_eq!(
            bounce(vec![(9, DAY * 2 - 50 * MINUTE)]),
            (true, 1),
            "moved 50 minutes ago"
        );
        assert_eq!(
            bounce(vec![(101, DAY * 2 - 5 * HOUR)]),
            (true, 1),
            "back to node 101"
        );
        assert_eq!(
            bounce(vec![(101, DAY - HOUR)]),
            (false, 0),
            "left it 25 hours ago"
        );
        assert_eq!(
            bounce(vec![(9, DAY * 2 - 2 * HOUR)]),
            (false, 0),
            "elsewhere, 2 hours ago"
        );
    }

    #[test]
    fn a_request_sent_again_is_counted_twice() {
        // The same UUID after the first ended, and a new one while the first is in flight.
        let (r, seen) = request(DAY, 1);
        let again = Request {
            at: DAY + 2 * HOUR,
            ..r.clone()
        };
        let (checks, v) = run(
            &[(r.clone(), seen.clone()), (again, seen.clone())],
            Some(MINUTE),
        );
        assert_eq!(
            (v[0].twice, v[1].twice, checks.counts.sent_twice),
            (false, true, 1)
        );
        let other = Request {
            uuid: "u-other".into(),
            at: DAY + 2 * HOUR,
            ..r.clone()
        };
        let (checks, v) = run(&[(r, seen.clone()), (other, seen)], None);
        assert_eq!((v[1].twice, checks.counts.sent_twice), (true, 1));
    }
}
