#!/usr/bin/env python3
"""A lower bound on the moves any plan needs to make GPUS pending GPUs placeable on a snapshot,
from an integer program (HiGHS) over a relaxation of the planner's problem. `recommend --plan`
is within X% of the fewest moves possible when its moves are within X% of this bound.

    fewest_moves.py SNAPSHOT.json (--gpus N | --plan PLAN.json) [--time-limit SECONDS]

PLAN.json is `kubectl alfred recommend -f SNAPSHOT --plan -o json`: the bound is then for the
pending GPUs its plan makes placeable, and the plan's moves are printed beside it.

What it keeps of the problem: per node, the Instances that leave it (the j largest: no j moves
free more GPUs), each of them landing on room of its own size in its own GPU pool, and pending
pods seated by GPU room (item sizes 1, 2, 4 and 8 divide each other, so these counts pack
exactly). What it drops, so that its optimum is never above the true one: CPU and memory, the
scheduler's other filters and the pending pods' node constraints, the order of moves and their
surges, and which Instances eligibility forbids moving (every OME pod counts as movable). Pods
of one Instance on several nodes are refused: moving one counts once, not per pod.
"""

import argparse
import collections
import json
import os
import sys
import time

try:
    import highspy
except ImportError:
    sys.exit("fewest_moves.py needs HiGHS for Python: pip install highspy")

INSTANCE_LABELS = ("ome.io/inferenceservice", "component", "ome.io/instance-index")


def gpus(pod):
    return sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0) or 0)
        for c in pod["spec"]["containers"]
    )


def read_cluster(items):
    """Per node (GPUs, pool, free GPUs, movable Instances' GPUs largest first); pending pods by
    size; free GPUs per pool."""
    nodes = {}
    on_node = collections.defaultdict(list)
    pending = collections.Counter()
    instances = collections.Counter()
    for o in items:
        if o.get("kind") == "Node":
            allocatable = o.get("status", {}).get("allocatable", {})
            pool = o["metadata"].get("labels", {}).get("nvidia.com/gpu.product", "")
            nodes[o["metadata"]["name"]] = (int(allocatable.get("nvidia.com/gpu", 0)), pool)
        elif o.get("kind") == "Pod" and o.get("status", {}).get("phase") in ("Running", "Pending"):
            g = gpus(o)
            if g == 0:
                continue
            labels = o["metadata"].get("labels", {})
            node = o["spec"].get("nodeName")
            if not node:
                pending[g] += 1
                continue
            movable = all(k in labels for k in INSTANCE_LABELS)
            if movable:
                key = tuple(labels[k] for k in INSTANCE_LABELS) + (o["metadata"].get("namespace"),)
                instances[key] += 1
                if instances[key] > 1:
                    sys.exit(f"Instance {key} has several GPU pods: this bound counts one move a pod")
            on_node[node].append((g, movable))
    types = collections.Counter()
    pool_free = collections.Counter()
    for name, (total, pool) in nodes.items():
        if total == 0:
            continue
        pods = on_node[name]
        free = total - sum(g for g, _ in pods)
        pool_free[pool] += free
        # An Instance that fills its node never helps: moving it only moves the whole room.
        movable = tuple(sorted((g for g, m in pods if m and g < total), reverse=True))
        types[(pool, total, free, movable)] += 1
    return types, pending, pool_free


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
        return h.modelStatusToString(h.getModelStatus()), info.objective_function_value, info.mip_dual_bound


def bound(types, pending, pool_free, target, time_limit):
    """The program: nodes alike (pool, GPUs, free GPUs, movable Instances) are one type, and per
    type and j (the j largest leave) how many nodes do so, what they seat and what lands there."""
    p = Program()
    sizes = sorted(set(pending) | {g for t in types for g in t[3]})
    moved_sizes = {(t[0], g) for t in types for g in t[3]}
    seated = collections.defaultdict(dict)  # size -> {column: 1}
    seated_gpus, seated_in_pool = {}, collections.defaultdict(dict)
    landing = collections.defaultdict(dict)  # (pool, size) -> landed minus left = 0
    for (pool, total, free, movable), count in types.items():
        choices = []
        for j in range(len(movable) + 1):
            room = free + sum(movable[:j])
            x = p.var(j, count)
            choices.append(x)
            for g in set(movable[:j]):
                landing[(pool, g)][x] = landing[(pool, g)].get(x, 0) - movable[:j].count(g)
            items = []
            for g in sizes:
                if g > room:
                    continue
                if g in pending:
                    y = p.var(0, count * (room // g))
                    items.append((g, y))
                    seated[g][y] = 1
                    seated_gpus[y] = g
                    seated_in_pool[pool][y] = g
                if (pool, g) in moved_sizes:
                    w = p.var(0, count * (room // g))
                    items.append((g, w))
                    landing[(pool, g)][w] = 1
            # Divisible sizes fit a node's room exactly when, for every size, the items that
            # large or larger fill no more than the room's whole multiples of it.
            for g in sizes:
                large = {col: size for size, col in items if size >= g}
                if large:
                    large[x] = -(g * (room // g))
                    p.row(large, None, 0)
        p.row({x: 1 for x in choices}, count, count)
    for g, coefs in seated.items():
        p.row(coefs, 0, pending[g])
    p.row(seated_gpus, target, None)
    # Moves move room around inside a pool; they add none to it.
    for pool, coefs in seated_in_pool.items():
        p.row(coefs, None, pool_free[pool])
    for coefs in landing.values():
        p.row(coefs, 0, 0)
    return p.solve(time_limit), len(p.cost)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--gpus", type=int, help="pending GPUs to make placeable")
    ap.add_argument("--plan", help="`recommend --plan -o json` of the same snapshot")
    ap.add_argument("--time-limit", type=float, default=600)
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
    types, pending, pool_free = read_cluster(items)
    start = time.time()
    (status, moves, dual), columns = bound(types, pending, pool_free, target, args.time_limit)
    out = {
        "pendingGpus": target,
        "pending": {str(g): n for g, n in sorted(pending.items())},
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
    print(json.dumps(out))


if __name__ == "__main__":
    main()
