#!/usr/bin/env python3
"""A lower bound on the moves any plan needs to make GPUS pending GPUs placeable on a snapshot,
from an integer program (HiGHS) over a relaxation of the planner's problem. `recommend --plan`
is within X% of the fewest moves possible when its moves are within X% of this bound.

    fewest_moves.py SNAPSHOT.json (--gpus N | --plan PLAN.json) [--gpus-only] [--time-limit SECONDS] [--explain]

PLAN.json is `kubectl alfred recommend -f SNAPSHOT --plan -o json`: the bound is then for the
pending GPUs its plan makes placeable, and the plan's moves are printed beside it.

What it keeps of the problem: per node, which Instances leave it (every choice of how many of
each size: the GPUs that frees exactly, and of CPU and memory at most the largest requests of
that many of that size), each of them landing on room of its own size in its own GPU pool, and
pending pods seated by room (sizes 1, 2, 4 and 8 divide each other, so these counts pack GPUs
exactly). CPU and memory: a landing Instance counts the least any of its size in its pool
requests, a pending pod its own requests (both rounded down), a node's room is rounded up (so
that nodes alike are one variable). What it drops, so that its optimum is never above the true
one: the scheduler's other filters and the pending pods' node constraints, the order of moves
and their surges, and which Instances eligibility forbids moving (every OME pod counts as
movable). `--gpus-only` drops CPU and memory too. Pods of one Instance on several nodes are
refused: moving one counts once, not per pod.

`--explain` adds where the moves are, in the program's solution and (with --plan) in the
plan: Instances moved by pool, the GPUs of the node they leave, and their own GPUs.
"""

import argparse
import collections
import itertools
import json
import math
import os
import sys
import time

try:
    import highspy
except ImportError:
    sys.exit("fewest_moves.py needs HiGHS for Python: pip install highspy")

INSTANCE_LABELS = ("ome.io/inferenceservice", "component", "ome.io/instance-index")

# Rounding steps for CPU (cores) and memory (GiB): room rounds up, demand down.
CPU_STEP, MEMORY_STEP = 2.0, 8.0


def quantity(text, unit):
    """A Kubernetes quantity in cores (unit 1) or GiB (unit 2**30)."""
    text = str(text)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor / unit
    return float(text) / unit


def requests(pod):
    """(GPUs, cores, GiB) the pod asks for."""
    g = cpu = memory = 0.0
    for c in pod["spec"]["containers"]:
        res = c.get("resources", {})
        g += int(res.get("limits", {}).get("nvidia.com/gpu", 0) or 0)
        cpu += quantity(res.get("requests", {}).get("cpu", 0), 1)
        memory += quantity(res.get("requests", {}).get("memory", 0), 2**30)
    return int(g), cpu, memory


def up(x, step):
    return math.ceil(x / step - 1e-9) * step


def down(x, step):
    return math.floor(x / step + 1e-9) * step


def read_cluster(items, gpus_only):
    """Node types (pool, GPUs, free GPUs, free cores, free GiB, movable Instances as (GPUs,
    cores, GiB) largest first) with their counts; per pool and size the least cores and GiB a
    movable Instance asks for; pending pods by (GPUs, cores, GiB); free GPUs per pool."""
    nodes = {}
    on_node = collections.defaultdict(list)
    pending = collections.Counter()
    least = {}  # (pool, size) -> (cores, GiB)
    instances = collections.Counter()

    def at_least(key, cpu, memory):
        old = least.get(key, (cpu, memory))
        least[key] = (min(old[0], cpu), min(old[1], memory))

    for o in items:
        if o.get("kind") == "Node":
            allocatable = o.get("status", {}).get("allocatable", {})
            pool = o["metadata"].get("labels", {}).get("nvidia.com/gpu.product", "")
            nodes[o["metadata"]["name"]] = (
                int(allocatable.get("nvidia.com/gpu", 0)),
                pool,
                quantity(allocatable.get("cpu", 0), 1),
                quantity(allocatable.get("memory", 0), 2**30),
            )
    for o in items:
        if o.get("kind") != "Pod" or o.get("status", {}).get("phase") not in ("Running", "Pending"):
            continue
        g, cpu, memory = requests(o)
        if gpus_only:
            cpu = memory = 0.0
        node = o["spec"].get("nodeName")
        if not node:
            if g > 0:
                pending[(g, down(cpu, CPU_STEP), down(memory, MEMORY_STEP))] += 1
            continue
        labels = o["metadata"].get("labels", {})
        movable = g > 0 and all(k in labels for k in INSTANCE_LABELS)
        if movable:
            key = tuple(labels[k] for k in INSTANCE_LABELS) + (o["metadata"].get("namespace"),)
            instances[key] += 1
            if instances[key] > 1:
                sys.exit(f"Instance {key} has several GPU pods: this bound counts one move a pod")
            if node in nodes:
                at_least((nodes[node][1], g), cpu, memory)
        on_node[node].append((g, cpu, memory, movable))
    types = collections.Counter()
    pool_free = collections.Counter()
    for name, (total, pool, cores, gib) in nodes.items():
        if total == 0:
            continue
        pods = on_node[name]
        free = total - sum(p[0] for p in pods)
        pool_free[pool] += free
        # An Instance that fills its node never helps: moving it only moves the whole room.
        movable = sorted(
            ((g, up(c, CPU_STEP), up(m, MEMORY_STEP)) for g, c, m, mv in pods if mv and g < total),
            reverse=True,
        )
        cpu_free = up(max(0.0, cores - sum(p[1] for p in pods)), CPU_STEP)
        memory_free = up(max(0.0, gib - sum(p[2] for p in pods)), MEMORY_STEP)
        types[(pool, total, free, cpu_free, memory_free, tuple(movable))] += 1
    least = {k: (down(c, CPU_STEP), down(m, MEMORY_STEP)) for k, (c, m) in least.items()}
    return types, least, pending, pool_free


class Program:
    def __init__(self):
        self.cost, self.upper, self.rows = [], [], []

    def var(self, cost, upper):
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, coefs, lower, upper):
        self.rows.append((coefs, lower, upper))

    def solve(self, time_limit):
        """Status, objective, dual bound; the column values are kept in `values`."""
        inf = highspy.kHighsInf
        lp = highspy.HighsLp()
        n = len(self.cost)
        lp.num_col_, lp.num_row_ = n, len(self.rows)
        lp.col_cost_ = [float(c) for c in self.cost]
        lp.col_lower_ = [0.0] * n
        lp.col_upper_ = [float(u) for u in self.upper]
        lp.row_lower_ = [-inf if r[1] is None else float(r[1]) for r in self.rows]
        lp.row_upper_ = [inf if r[2] is None else float(r[2]) for r in self.rows]
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        by_column = collections.defaultdict(list)
        for i, (coefs, _, _) in enumerate(self.rows):
            for k, v in coefs.items():
                by_column[k].append((i, float(v)))
        start, index, value = [0], [], []
        for k in range(n):
            for i, v in sorted(by_column[k]):
                index.append(i)
                value.append(v)
            start.append(len(index))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = start, index, value
        # HiGHS prints a banner on standard output as it starts: keep the JSON line alone there.
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        try:
            h = highspy.Highs()
            h.setOptionValue("output_flag", False)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        h.setOptionValue("time_limit", float(time_limit))
        h.passModel(lp)
        h.run()
        info = h.getInfo()
        self.values = list(h.getSolution().col_value)
        return h.modelStatusToString(h.getModelStatus()), info.objective_function_value, info.mip_dual_bound


def bound(types, least, pending, pool_free, target, time_limit):
    """The program: nodes alike are one type, and per type and choice of the Instances that
    leave it (how many of each size) how many nodes do so, what they seat and what lands
    there."""
    p = Program()
    leaving_of = {}  # column -> (pool, node GPUs, {Instance GPUs: how many leave})
    sizes = sorted({k[0] for k in pending} | {m[0] for t in types for m in t[5]})
    moved_sizes = {(t[0], m[0]) for t in types for m in t[5]}
    seated = collections.defaultdict(dict)  # pending class -> {column: 1}
    seated_gpus, seated_in_pool = {}, collections.defaultdict(dict)
    landing = collections.defaultdict(dict)  # (pool, size) -> landed minus left = 0
    for (pool, total, free, cpu_free, memory_free, movable), count in types.items():
        # Per size of movable Instance: their CPU and memory requests, largest first.
        of_size = collections.defaultdict(lambda: ([], []))
        for g, cpu, memory in movable:
            of_size[g][0].append(cpu)
            of_size[g][1].append(memory)
        for lists in of_size.values():
            lists[0].sort(reverse=True)
            lists[1].sort(reverse=True)
        choices = []
        for counts in itertools.product(*(range(len(c) + 1) for c, _ in of_size.values())):
            leaving = dict(zip(of_size, counts))
            room = free + sum(g * k for g, k in leaving.items())
            cpu_room = cpu_free + sum(sum(of_size[g][0][:k]) for g, k in leaving.items())
            memory_room = memory_free + sum(sum(of_size[g][1][:k]) for g, k in leaving.items())
            x = p.var(sum(counts), count)
            choices.append(x)
            leaving_of[x] = (pool, total, leaving)
            for g, k in leaving.items():
                if k:
                    landing[(pool, g)][x] = landing[(pool, g)].get(x, 0) - k
            items = []  # (size, column, cores, GiB)
            for cls in pending:
                g = cls[0]
                if g <= room and cls[1] <= cpu_room and cls[2] <= memory_room:
                    y = p.var(0, count * (room // g))
                    items.append((g, y) + cls[1:])
                    seated[cls][y] = 1
                    seated_gpus[y] = g
                    seated_in_pool[pool][y] = g
            for g in sizes:
                if g <= room and (pool, g) in moved_sizes:
                    w = p.var(0, count * (room // g))
                    items.append((g, w) + least[(pool, g)])
                    landing[(pool, g)][w] = 1
            # Divisible sizes fit a node's room exactly when, for every size, the items that
            # large or larger fill no more than the room's whole multiples of it.
            for g in sizes:
                large = {col: size for size, col, _, _ in items if size >= g}
                if large:
                    large[x] = -(g * (room // g))
                    p.row(large, None, 0)
            for k, node_room in ((2, cpu_room), (3, memory_room)):
                need = {item[1]: item[k] for item in items if item[k] > 0}
                if need:
                    need[x] = -node_room
                    p.row(need, None, 0)
        p.row({x: 1 for x in choices}, count, count)
    for cls, coefs in seated.items():
        p.row(coefs, 0, pending[cls])
    p.row(seated_gpus, target, None)
    # Moves move room around inside a pool; they add none to it.
    for pool, coefs in seated_in_pool.items():
        p.row(coefs, None, pool_free[pool])
    for coefs in landing.values():
        p.row(coefs, 0, 0)
    result = p.solve(time_limit)
    moved = collections.Counter()
    for x, (pool, total, leaving) in leaving_of.items():
        nodes = round(p.values[x]) if len(p.values) > x else 0
        for g, k in leaving.items():
            if nodes and k:
                moved[(pool, total, g)] += nodes * k
    for pool, coefs in seated_in_pool.items():
        for y, g in coefs.items():
            seats = round(p.values[y]) if len(p.values) > y else 0
            if seats:
                moved[(pool, "seats", g)] += seats
    return result, len(p.cost), moved


def plan_moves(items, plan):
    """The plan's moves by (pool, GPUs of the node left, the Instance's GPUs)."""
    node = {}
    for o in items:
        if o.get("kind") == "Node":
            labels = o["metadata"].get("labels", {})
            gpus = int(o.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", 0))
            node[o["metadata"]["name"]] = (labels.get("nvidia.com/gpu.product", ""), gpus)
    moved = collections.Counter()
    for step in plan["steps"]:
        pool, total = node.get(step["from"][0], ("", 0))
        moved[(pool, total, step["gpus"])] += 1
    return moved


def by_place(moved):
    """`pool, node GPUs, Instance GPUs` -> count (and `pool seats N-GPU pods` -> count), for
    the JSON line."""
    return {
        f"{pool} seats {g}-GPU pods" if total == "seats" else f"{pool} {total}-GPU node, {g}-GPU": n
        for (pool, total, g), n in sorted(moved.items(), key=str)
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--gpus", type=int, help="pending GPUs to make placeable")
    ap.add_argument("--plan", help="`recommend --plan -o json` of the same snapshot")
    ap.add_argument("--gpus-only", action="store_true", help="leave CPU and memory out")
    ap.add_argument("--time-limit", type=float, default=600)
    ap.add_argument("--explain", action="store_true", help="where the moves are, solution and plan")
    args = ap.parse_args()
    try:
        with open(args.snapshot) as f:
            items = json.load(f).get("items", [])
        plan = None
        if args.plan:
            with open(args.plan) as f:
                plan = json.load(f)["plan"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{e}: give a JSON List snapshot and, with --plan, recommend --plan -o json output")
    target = args.gpus if args.gpus is not None else plan and plan["curve"][-1]["pendingGpus"]
    if target is None:
        sys.exit("give --gpus N or --plan FILE")
    types, least, pending, pool_free = read_cluster(items, args.gpus_only)
    start = time.time()
    (status, moves, dual), columns, moved = bound(types, least, pending, pool_free, target, args.time_limit)
    by_size = collections.Counter()
    for (g, _, _), n in sorted(pending.items()):
        by_size[str(g)] += n
    out = {
        "pendingGpus": target,
        "pending": by_size,
        "nodeTypes": len(types),
        "columns": columns,
        "status": status,
        # With the time limit hit, the proven bound is the dual one.
        "fewestMovesAtLeast": round(moves if status == "Optimal" else dual),
        "seconds": round(time.time() - start, 1),
    }
    if plan:
        out["planMoves"] = len(plan["steps"])
        out["planAboveBound"] = f"{100 * (out['planMoves'] / max(1, out['fewestMovesAtLeast']) - 1):.1f}%"
    if args.explain:
        out["solutionMoves"] = by_place(moved)
        if plan:
            out["planMovesByPlace"] = by_place(plan_moves(items, plan))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
