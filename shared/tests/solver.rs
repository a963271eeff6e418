//! Properties of the assignment solver on random small problems: the plan, replayed move by
//! move, never breaks a hard constraint, never lets an object into a container being freed, and
//! never ends worse than it started; the same seed gives the same plan.

use alfred::solver::{
    AffinitySpec, CapacitySpec, MinimizeMovementSpec, Options, PinnedSpec, Policy, Preference,
    Problem, Solution, Spec, ToFreeSpec, Unlimited, solve,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    capacities: Vec<u8>,
    /// (container, gpus) per object.
    objects: Vec<(usize, u8)>,
    freed: Vec<usize>,
    pinned: Vec<usize>,
    preferences: Vec<(usize, usize)>,
    movement_goal: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..7).prop_flat_map(|containers| {
        (
            proptest::collection::vec(0u8..9, containers),
            proptest::collection::vec((0..containers, 0u8..5), 0..18),
            proptest::collection::vec(0..containers, 0..3),
            proptest::collection::vec(0usize..18, 0..3),
            proptest::collection::vec((0usize..18, 0..containers), 0..4),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(
                |(capacities, objects, freed, pinned, preferences, movement_goal, seed)| Case {
                    capacities,
                    objects,
                    freed,
                    pinned,
                    preferences,
                    movement_goal,
                    seed,
                },
            )
    })
}

fn build(case: &Case) -> Problem {
    let mut p = Problem::new();
    for c in 0..case.capacities.len() {
        p.add_container(&format!("host{c}")).unwrap();
    }
    let gpu = p.add_dimension("gpu", 0.0, None).unwrap();
    for (c, cap) in case.capacities.iter().enumerate() {
        p.set_capacity(gpu, c, f64::from(*cap));
    }
    for (i, (c, gpus)) in case.objects.iter().enumerate() {
        let o = p.add_object(&format!("task{i}"), *c).unwrap();
        p.set_value(gpu, o, f64::from(*gpus));
    }
    let n = case.objects.len();
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: gpu,
            limit: None,
        }),
        Policy::Default,
    );
    p.add_constraint(
        Spec::ToFree(ToFreeSpec {
            containers: case.freed.clone(),
            dimension: None,
            ..Default::default()
        }),
        Policy::Default,
    );
    let pinned: Vec<usize> = case.pinned.iter().copied().filter(|o| *o < n).collect();
    p.add_constraint(
        Spec::Pinned(PinnedSpec { objects: pinned }),
        Policy::Default,
    );
    let preferences: Vec<Preference> = case
        .preferences
        .iter()
        .filter(|(o, _)| *o < n)
        .map(|&(object, container)| Preference {
            object,
            container,
            weight: 1.0,
        })
        .collect();
    p.add_goal(Spec::Affinity(AffinitySpec { preferences }), 0, 1.0);
    if case.movement_goal {
        p.add_goal(Spec::MinimizeMovement(MinimizeMovementSpec), 1, 1.0);
    }
    p
}

/// The objective of a state, recomputed from scratch: (freed-container objects, capacity
/// overload of initially broken containers, affinity misses, moved objects).
fn score(case: &Case, at: &[usize], initially_over: &[bool]) -> (f64, f64, f64) {
    let mut used = vec![0.0; case.capacities.len()];
    for (o, &c) in at.iter().enumerate() {
        used[c] += f64::from(case.objects[o].1);
    }
    let freed: std::collections::BTreeSet<usize> = case.freed.iter().copied().collect();
    let left = freed
        .iter()
        .map(|&c| at.iter().filter(|&&x| x == c).count() as f64)
        .sum::<f64>();
    let overload = (0..used.len())
        .filter(|&c| initially_over[c])
        .map(|c| (used[c] - f64::from(case.capacities[c])).max(0.0))
        .sum::<f64>();
    let misses = case
        .preferences
        .iter()
        .filter(|(o, c)| *o < at.len() && at[*o] != *c)
        .count() as f64;
    (
        left + overload,
        misses,
        at.iter()
            .zip(&case.objects)
            .filter(|(a, (c, _))| **a != *c)
            .count() as f64,
    )
}

fn run(case: &Case) -> Solution {
    let options = Options {
        seed: case.seed,
        ..Options::default()
    };
    solve(&build(case), &options, &Unlimited).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn moves_keep_hard_constraints_and_never_enter_a_freed_container(case in case()) {
        let s = run(&case);
        let mut used = vec![0.0; case.capacities.len()];
        let mut at: Vec<usize> = case.objects.iter().map(|(c, _)| *c).collect();
        for (c, g) in &case.objects {
            used[*c] += f64::from(*g);
        }
        let cap = |c: usize| f64::from(case.capacities[c]);
        let initially_over: Vec<bool> = (0..used.len()).map(|c| used[c] > cap(c)).collect();
        let pinned: Vec<usize> = case.pinned.clone();
        for m in &s.moves {
            prop_assert_eq!(at[m.object], m.from);
            prop_assert!(!pinned.contains(&m.object), "pinned object moved: {:?}", m);
            let g = f64::from(case.objects[m.object].1);
            let before_to = used[m.to];
            used[m.from] -= g;
            used[m.to] += g;
            at[m.object] = m.to;
            // A container within capacity stays within; one over capacity never gets fuller.
            if initially_over[m.to] {
                prop_assert!(used[m.to] <= before_to.max(cap(m.to)) + 1e-9, "{:?}", m);
            } else {
                prop_assert!(used[m.to] <= cap(m.to) + 1e-9, "{:?} overfills", m);
            }
            prop_assert!(!case.freed.contains(&m.to), "{:?} enters a container being freed", m);
        }
        prop_assert_eq!(&at, &s.assignment);
    }

    #[test]
    fn the_result_never_scores_worse_than_the_start(case in case()) {
        let s = run(&case);
        let initial: Vec<usize> = case.objects.iter().map(|(c, _)| *c).collect();
        let mut used = vec![0.0; case.capacities.len()];
        for (c, g) in &case.objects {
            used[*c] += f64::from(*g);
        }
        let over: Vec<bool> = (0..used.len()).map(|c| used[c] > f64::from(case.capacities[c])).collect();
        let before = score(&case, &initial, &over);
        let after = score(&case, &s.assignment, &over);
        prop_assert!(after.0 <= before.0 + 1e-9);
        if (after.0 - before.0).abs() <= 1e-9 {
            prop_assert!(after.1 <= before.1 + 1e-9, "{:?} -> {:?}", before, after);
        }
        prop_assert!(s.final_violation <= s.initial_violation + 1e-9);
        prop_assert!(s.broken.1 <= s.broken.0 + case.freed.len(), "{:?}", s.broken);
    }

    #[test]
    fn the_same_seed_gives_the_same_plan(case in case()) {
        prop_assert_eq!(run(&case), run(&case));
    }
}

#[test]
fn ill_formed_problems_are_errors_not_panics() {
    let mut p = Problem::new();
    let h = p.add_container("host0").unwrap();
    assert!(
        p.add_container("host0")
            .unwrap_err()
            .to_string()
            .contains("listed twice")
    );
    p.add_object("a", h).unwrap();
    let h1 = p.add_container("host1").unwrap();
    let e = p.add_object("a", h1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "object a is in two containers (host0 and host1); each object is in exactly one"
    );
    assert!(p.add_dimension("count", 1.0, None).is_err());

    let mut p = Problem::new();
    let h = p.add_container("host0").unwrap();
    let a = p.add_object("a", h).unwrap();
    let d = p.add_dimension("gpu", 1.0, Some(-1.0)).unwrap();
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: d,
            limit: None,
        }),
        Policy::Default,
    );
    let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
    assert!(
        e.to_string()
            .contains("capacities must be numbers from 0 to 1e12"),
        "{e}"
    );

    let mut p = Problem::new();
    let h = p.add_container("host0").unwrap();
    p.add_object("a", h).unwrap();
    p.add_constraint(Spec::Affinity(AffinitySpec::default()), Policy::Default);
    let e = solve(&p, &Options::default(), &Unlimited).unwrap_err();
    assert_eq!(e.to_string(), "affinity is a goal, not a constraint");
    let _ = a;
}

/// One 8-GPU task on a host to free, and nowhere else with room.
/// Numbers a file may hold: a negative or NaN limit, or values whose sums overflow, are
/// errors naming the value, never a silently blocked search or `initialViolation: null`.
#[test]
fn numbers_out_of_range_are_refused_where_read() {
    use alfred::solver::file::ProblemDocument;
    let refused = |text: &str| match ProblemDocument::parse(text)
        .map(|d| solve(&d.problem, &d.options, &Unlimited))
    {
        Ok(Ok(s)) => panic!("accepted {text}: violation {}", s.initial_violation),
        Ok(Err(e)) | Err(e) => e.to_string(),
    };
    let base = "assignment: {h0: [a, b], h1: []}\ndimensions: {gpu: {objectDefault: 1, containerDefault: 1}}\n";
    let e = refused(&format!(
        "{base}constraints:\n  - capacity: {{dimension: gpu, limit: -1}}\n"
    ));
    assert!(
        e.contains("limit -1; a limit is a number from 0 to 1e12"),
        "{e}"
    );
    let e = refused(&format!(
        "{base}constraints:\n  - capacity: {{dimension: gpu, limit: .nan}}\n"
    ));
    assert!(e.contains("not a number a reader can use"), "{e}");
    let e = refused(
        "assignment: {h0: [a, b]}\ndimensions: {gpu: {objects: {a: 1e308, b: 1e308}, containerDefault: 1}}\nconstraints:\n  - capacity: {dimension: gpu}\n",
    );
    assert!(
        e.contains("object a has value 1e308; values must be numbers from -1e12 to 1e12"),
        "{e}"
    );
    let e = refused(&format!(
        "{base}goals:\n  - minimizeMovement: {{}}\n    weight: 1e300\n"
    ));
    assert!(e.contains("weight must be a number from 0 to 1e12"), "{e}");
    // At the bound, sums stay finite.
    let d = ProblemDocument::parse(
        "assignment: {h0: [a, b]}\ndimensions: {gpu: {objects: {a: 1e12, b: 1e12}, containerDefault: 1}}\nconstraints:\n  - capacity: {dimension: gpu}\n",
    )
    .unwrap();
    let s = solve(&d.problem, &d.options, &Unlimited).unwrap();
    assert_eq!(s.initial_violation, 2e12 - 1.0);
}

/// Past the time limit the search stops, and the report of what it could not move does not
/// start a scan of every container for every object.
#[test]
fn an_exhausted_budget_ends_the_search_and_its_report_at_once() {
    struct Spent;
    impl alfred::solver::Budget for Spent {
        fn exhausted(&self) -> bool {
            true
        }
    }
    let mut p = Problem::new();
    let containers: Vec<_> = (0..200)
        .map(|i| p.add_container(&format!("h{i}")).unwrap())
        .collect();
    for o in 0..2000 {
        p.add_object(&format!("t{o}"), containers[o % 20]).unwrap();
    }
    let d = p.add_dimension("gpu", 1.0, Some(50.0)).unwrap();
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: d,
            limit: None,
        }),
        Policy::Default,
    );
    let s = solve(&p, &Options::default(), &Spent).unwrap();
    assert_eq!(s.end_reason, alfred::solver::EndReason::TimeLimit);
    assert!(s.moves.is_empty());
    assert!(!s.unmovable.is_empty());
    assert!(
        s.unmovable
            .iter()
            .all(|u| u.reason == "the time limit ran out before it was moved or its reason found")
    );
}

fn no_room_to_drain(policy: Policy) -> Problem {
    let mut p = Problem::new();
    let h0 = p.add_container("host0").unwrap();
    let h1 = p.add_container("host1").unwrap();
    let gpu = p.add_dimension("gpu", 8.0, Some(8.0)).unwrap();
    p.add_object("big", h0).unwrap();
    p.add_object("other", h1).unwrap();
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: gpu,
            limit: None,
        }),
        Policy::Default,
    );
    p.add_constraint(
        Spec::ToFree(ToFreeSpec {
            containers: vec![h0],
            ..Default::default()
        }),
        policy,
    );
    p
}

#[test]
fn a_hard_constraint_left_broken_is_an_error() {
    let e = solve(
        &no_room_to_drain(Policy::Hard),
        &Options::default(),
        &Unlimited,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("hard constraint toFree(count) is still broken in 1"),
        "{e}"
    );
    // Under the default policy the same problem is a best effort that says why.
    let s = solve(
        &no_room_to_drain(Policy::Default),
        &Options::default(),
        &Unlimited,
    )
    .unwrap();
    assert!(s.moves.is_empty());
    assert_eq!(s.unmovable.len(), 1);
    assert_eq!(s.unmovable[0].reason, "capacity(gpu) in 1 container");
}

#[test]
fn an_ejection_chain_makes_room_for_a_large_object() {
    // host0 (to free) holds an 8-GPU task. host1 has 6 free; host2 has room for host1's two
    // 1-GPU tasks. Strict descent cannot move the big task; the chain moves the small ones first.
    let mut p = Problem::new();
    let hosts: Vec<usize> = (0..3)
        .map(|i| p.add_container(&format!("host{i}")).unwrap())
        .collect();
    let gpu = p.add_dimension("gpu", 1.0, Some(8.0)).unwrap();
    let big = p.add_object("big", hosts[0]).unwrap();
    p.set_value(gpu, big, 8.0);
    p.add_object("s1", hosts[1]).unwrap();
    p.add_object("s2", hosts[1]).unwrap();
    let filler = p.add_object("filler", hosts[2]).unwrap();
    p.set_value(gpu, filler, 5.0);
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: gpu,
            limit: None,
        }),
        Policy::Default,
    );
    p.add_constraint(
        Spec::ToFree(ToFreeSpec {
            containers: vec![hosts[0]],
            ..Default::default()
        }),
        Policy::Default,
    );
    let s = solve(&p, &Options::default(), &Unlimited).unwrap();
    let names: Vec<(&str, &str)> = s
        .moves
        .iter()
        .map(|m| (p.object_name(m.object), p.container_name(m.to)))
        .collect();
    assert_eq!(names.len(), 3);
    assert_eq!(names[2], ("big", "host1"), "{names:?}");
    assert!(names[..2].iter().all(|(_, to)| *to == "host2"), "{names:?}");
    assert_eq!(s.broken, (1, 0));
}

mod file {
    use alfred::solver::file::{ProblemDocument, SolutionReport};
    use alfred::solver::{Unlimited, solve};

    /// The example from the issue, in the file format.
    const EXAMPLE: &str = r#"
assignment: {host0: [task0, task1, task2], host1: [task3], host2: []}
dimensions:
  gpu: {objects: {task0: 1}, objectDefault: 0, containers: {host0: 8}, containerDefault: 8}
constraints:
  - capacity: {dimension: gpu}
  - toFree: {containers: [host0], dimension: gpu}
    policy: default
goals:
  - toFree: {containers: [host1], formula: MINIMIZE_OCCUPIED_CONTAINERS}
    priority: 0
    weight: 1
  - affinity: [{object: task3, container: host0, weight: 1}]
    priority: 1
  - minimizeMovement: {}
    priority: 2
solver: {timeLimitSeconds: 10, maxMoves: 100000, seed: 1}
"#;

    #[test]
    fn the_documented_example_solves() {
        let doc = ProblemDocument::parse(EXAMPLE).unwrap();
        assert_eq!(doc.time_limit_seconds, Some(10.0));
        let s = solve(&doc.problem, &doc.options, &Unlimited).unwrap();
        let r = SolutionReport::new(&doc.problem, &s);
        // task0, the only GPU user, must leave host0; task3 uses no GPU, so the gpu constraint
        // lets it into host0, which it prefers, and that empties host1 as the goal wants.
        assert_ne!(r.assignment["task0"], "host0");
        assert_eq!(r.assignment["task1"], "host0");
        assert_eq!(r.assignment["task3"], "host0");
        assert_eq!(r.priorities, vec![0, 1, 2]);
        assert_eq!(r.initial_objective, vec![1.0, 1.0, 0.0]);
        assert_eq!(r.final_objective, vec![0.0, 0.0, 2.0]);
        assert_eq!(r.end_reason, "NoImprovingMove");
        assert_eq!((r.broken.initial, r.broken.final_), (1, 0));
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "assignment",
            "moves",
            "initialObjective",
            "finalObjective",
            "broken",
            "endReason",
            "unmovable",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        assert_eq!(
            json["broken"],
            serde_json::json!({"initial": 1, "final": 0})
        );
    }

    #[test]
    fn ill_formed_files_say_what_is_wrong() {
        let cases = [
            (
                "assignment: {h: [a]}\nconstraints: [{capacity: {dimension: gpu}}]\n",
                "constraints[0].capacity: unknown dimension gpu",
            ),
            (
                "assignment: {h: [a], g: [a]}\n",
                "object a is in two containers (h and g)",
            ),
            (
                "assignment: {h: [a]}\ngoals: [{affinity: [{object: b, container: h}]}]\n",
                "goals[0].affinity: unknown object b",
            ),
            (
                "assignment: {h: [a]}\nconstraints: [{toFree: {containers: [x]}}]\n",
                "constraints[0].toFree: unknown container x",
            ),
            (
                "assignment: {h: [a]}\nconstraints: [{minimizeMovement: {}, pinned: {objects: [a]}}]\n",
                "constraints[0]: give exactly one of",
            ),
            (
                "assignment: {h: [a]}\nconstraints: [{pinned: {objects: [a]}, policy: strict}]\n",
                "constraints[0].policy: \"strict\" is not one of default, hard, soft",
            ),
            (
                "assignment: {h: [a]}\ngoals: [{minimizeMovement: {}, policy: hard}]\n",
                "goals[0]: policy is for constraints",
            ),
            (
                "assignment: {h: [a]}\ndimensions: {count: {objectDefault: 2}}\n",
                "count is built in",
            ),
            (
                "assignment: {h: [a]}\nsolver: {timeLimitSeconds: 0}\n",
                "solver.timeLimitSeconds must be above 0",
            ),
            (
                "assignment: {h: [a]}\nsolver: {timeLimitSeconds: 1e19}\n",
                "solver.timeLimitSeconds must be above 0 and at most 86400 (a day), got 10000000000000000000",
            ),
            (
                "assignment: {h: [a]}\nsolver: {timeLimitSeconds: 1e300}\n",
                "at most 86400 (a day)",
            ),
            (
                "assignment: {h: [a]}\nsolver: {seeds: 1}\n",
                "unknown field `seeds`",
            ),
            (
                "assignment: {h: a}\n",
                "assignment.h: a list of object names",
            ),
            ("assignment: [h]\n", "assignment"),
            ("{{{", ""),
        ];
        for (text, want) in cases {
            let e = ProblemDocument::parse(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} parsed"));
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn count_capacities_limit_objects_per_container() {
        let doc = ProblemDocument::parse(
            "assignment: {h0: [a, b, c], h1: []}\ndimensions: {count: {containerDefault: 2}}\n\
             constraints: [{capacity: {dimension: count}}]\n",
        )
        .unwrap();
        let s = solve(&doc.problem, &doc.options, &Unlimited).unwrap();
        assert_eq!(s.moves.len(), 1);
        assert_eq!(s.broken, (1, 0));
    }
}

mod limits {
    use alfred::solver::file::ProblemDocument;
    use alfred::solver::{Budget, EndReason, Options, Unlimited, solve};

    const DRAIN: &str = "assignment: {h0: [a, b, c], h1: [], h2: []}\n\
                         constraints: [{toFree: {containers: [h0]}}]\n";

    struct Spent;
    impl Budget for Spent {
        fn exhausted(&self) -> bool {
            true
        }
    }

    #[test]
    fn the_move_limit_stops_the_search_with_a_consistent_plan() {
        let doc = ProblemDocument::parse(DRAIN).unwrap();
        let options = Options {
            max_moves: 2,
            ..doc.options.clone()
        };
        let s = solve(&doc.problem, &options, &Unlimited).unwrap();
        assert_eq!(s.end_reason, EndReason::MoveLimit);
        assert_eq!(s.moves.len(), 2);
        assert_eq!(s.final_violation, 1.0);
        assert_eq!(s.unmovable.len(), 1, "the object left is reported");
        assert_eq!(
            s.unmovable[0].reason,
            "the search ended (MoveLimit) before moving it"
        );
    }

    #[test]
    fn a_spent_budget_stops_before_any_move() {
        let doc = ProblemDocument::parse(DRAIN).unwrap();
        let s = solve(&doc.problem, &doc.options, &Spent).unwrap();
        assert_eq!(s.end_reason, EndReason::TimeLimit);
        assert!(s.moves.is_empty());
        assert_eq!(s.broken, (1, 1));
    }
}
