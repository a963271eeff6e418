//! Drain benchmark for the assignment solver (issue: "Assignment solver with ToFreeSpec").
//! Generates from a seed a pool of 8-GPU containers, objects of 1/2/4/8 GPUs (probabilities
//! 0.88/0.07/0.03/0.02) placed randomly to about 78% full, and drains 5% of the containers under
//! capacity + ToFree constraints; then checks the plan and prints the figures.
//!
//!     cargo run --release -p alfred-shared --example solver_bench -- [CONTAINERS] [SPARE] [SEED]
//!     ... -- 2000 0 1            (the first target: 2,000 containers, ~10,000 objects)
//!     ... -- 10000 100 1         (the second: 10,000 containers, ~50,000 objects, 100 spare)
//!     ... -- 2000 0 1 --write problem.yaml   (also write the problem in the `solve` format)

use std::time::Instant;

use alfred::solver::{
    CapacitySpec, Options, Policy, Problem, SeededRng, Spec, ToFreeSpec, Unlimited, solve,
};

const GPUS: u32 = 8;
const FILL: f64 = 0.78;
const DRAIN: f64 = 0.05;

struct Rng(SeededRng);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Container -> its objects' sizes, then the drained containers.
fn generate(containers: usize, spare: usize, seed: u64) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut rng = Rng(SeededRng(seed));
    let target = (containers as f64 * f64::from(GPUS) * FILL) as u32;
    let mut sizes = Vec::new();
    let mut total = 0;
    while total < target {
        let p = rng.unit();
        let size = if p < 0.88 {
            1
        } else if p < 0.95 {
            2
        } else if p < 0.98 {
            4
        } else {
            8
        };
        sizes.push(size);
        total += size;
    }
    // In the order drawn, each into a random container with room (an object that fits
    // nowhere is left out).
    let mut free = vec![GPUS; containers];
    let mut placed: Vec<Vec<u32>> = vec![Vec::new(); containers + spare];
    for size in sizes {
        let random = (0..64)
            .map(|_| rng.below(containers))
            .find(|&c| free[c] >= size);
        let start = rng.below(containers);
        let fits = random.or_else(|| {
            (0..containers)
                .map(|i| (start + i) % containers)
                .find(|&c| free[c] >= size)
        });
        if let Some(c) = fits {
            free[c] -= size;
            placed[c].push(size);
        }
    }
    let mut drained: Vec<usize> = (0..containers).collect();
    for i in 0..drained.len() {
        let j = i + rng.below(drained.len() - i);
        drained.swap(i, j);
    }
    drained.truncate((containers as f64 * DRAIN) as usize);
    drained.sort_unstable();
    (placed, drained)
}

/// A drain of 5% of a pool of 8-GPU containers under capacity and ToFree constraints.
#[derive(clap::Parser)]
struct Args {
    #[arg(default_value_t = 2000)]
    containers: usize,
    /// Empty containers beside the placed ones
    #[arg(default_value_t = 0)]
    spare: usize,
    #[arg(default_value_t = 1)]
    seed: u64,
    /// Also write the problem in the `solve` format
    #[arg(long, value_name = "FILE")]
    write: Option<String>,
}

fn main() {
    let Args {
        containers,
        spare,
        seed,
        write,
    } = clap::Parser::parse();

    let (placed, drained) = generate(containers, spare, seed);
    let mut p = Problem::new();
    let gpu = p.add_dimension("gpu", 0.0, Some(f64::from(GPUS))).unwrap();
    for (c, sizes) in placed.iter().enumerate() {
        let id = p.add_container(&format!("host{c}")).unwrap();
        for (k, size) in sizes.iter().enumerate() {
            let o = p.add_object(&format!("task{c}-{k}"), id).unwrap();
            p.set_value(gpu, o, f64::from(*size));
        }
    }
    p.add_constraint(
        Spec::Capacity(CapacitySpec {
            dimension: gpu,
            limit: None,
        }),
        Policy::Default,
    );
    p.add_constraint(
        Spec::ToFree(ToFreeSpec {
            containers: drained.clone(),
            dimension: None,
            ..Default::default()
        }),
        Policy::Default,
    );
    if let Some(path) = write {
        std::fs::write(path, problem_yaml(&placed, &drained)).expect("write problem");
    }
    let objects = p.object_count();
    let to_move: usize = drained.iter().map(|&c| placed[c].len()).sum();
    println!(
        "{} containers ({spare} spare), {objects} objects, draining {} containers holding {to_move} objects",
        p.container_count(),
        drained.len()
    );

    let start = Instant::now();
    let s = solve(
        &p,
        &Options {
            seed,
            ..Options::default()
        },
        &Unlimited,
    )
    .expect("solve");
    let elapsed = start.elapsed();

    // Check the plan independently: replay it move by move.
    let mut used = vec![0.0; p.container_count()];
    let mut at = vec![0; objects];
    for (c, sizes) in placed.iter().enumerate() {
        used[c] = sizes.iter().map(|s| f64::from(*s)).sum();
    }
    let mut o = 0;
    for (c, sizes) in placed.iter().enumerate() {
        for _ in sizes {
            at[o] = c;
            o += 1;
        }
    }
    let sizes: Vec<f64> = placed.iter().flatten().map(|s| f64::from(*s)).collect();
    let mut exceeded = 0;
    for m in &s.moves {
        assert_eq!(at[m.object], m.from, "moves replay in order");
        used[m.from] -= sizes[m.object];
        used[m.to] += sizes[m.object];
        at[m.object] = m.to;
        if used[m.to] > f64::from(GPUS) {
            exceeded += 1;
        }
    }
    let occupied = drained
        .iter()
        .filter(|&&c| used[c] > 0.0 || at.contains(&c))
        .count();
    let extra = s.moves.len() - to_move.min(s.moves.len());
    println!(
        "solved in {:.3} s: {} moves ({extra} to make room), drained containers still occupied: {occupied}, moves over capacity: {exceeded}, end: {}, unmovable: {}",
        elapsed.as_secs_f64(),
        s.moves.len(),
        s.end_reason.as_str(),
        s.unmovable.len()
    );
    for u in s.unmovable.iter().take(5) {
        println!(
            "  unmovable {} on {}: {}",
            p.object_name(u.object),
            p.container_name(u.container),
            u.reason
        );
    }
}

/// The same problem in the `kubectl alfred solve` format.
fn problem_yaml(placed: &[Vec<u32>], drained: &[usize]) -> String {
    let mut out = String::from("assignment:\n");
    let mut values = String::new();
    for (c, sizes) in placed.iter().enumerate() {
        let names: Vec<String> = (0..sizes.len()).map(|k| format!("task{c}-{k}")).collect();
        out.push_str(&format!("  host{c}: [{}]\n", names.join(", ")));
        for (k, size) in sizes.iter().enumerate() {
            values.push_str(&format!("      task{c}-{k}: {size}\n"));
        }
    }
    out.push_str(&format!(
        "dimensions:\n  gpu:\n    objectDefault: 0\n    containerDefault: {GPUS}\n    objects:\n{values}"
    ));
    let hosts: Vec<String> = drained.iter().map(|c| format!("host{c}")).collect();
    out.push_str(&format!(
        "constraints:\n  - capacity: {{dimension: gpu}}\n  - toFree: {{containers: [{}]}}\n",
        hosts.join(", ")
    ));
    out
}
