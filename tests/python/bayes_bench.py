"""W&B's bayes (`sweeps` 0.3.0, `bayes_search_next_runs`) driven over the bayes benchmark's test
functions, as src/model/sweep/bayes/bench.rs drives lachesis' own: prints, as JSON, each
sweep's best value (the noiseless function at the best member tried) by function, max_live
and budget, one per seed.

    $(bash tests/python/sweeps.sh) tests/python/bayes_bench.py --seeds 30

A sweep with max_live L starts L members at once (each later one imputing those before it, as
`bayes_search_next_runs(runs, config, n=L)` chains them); then the oldest member in flight ends
with its noisy value and one more is suggested with the others still in flight, until the
budget is spent.
"""
import argparse
import json
import math
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np
from sweeps import RunState, SweepRun, bayes_search


def forrester(c):
    x = c["x"]
    return (6 * x - 2) ** 2 * math.sin(12 * x - 4)


def branin(c):
    x1, x2 = c["x1"], c["x2"]
    b, cc, r, s, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + cc * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


HARTMANN_A = [[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]]
HARTMANN_P = [
    [0.3689, 0.1170, 0.2673],
    [0.4699, 0.4387, 0.7470],
    [0.1091, 0.8732, 0.5547],
    [0.0381, 0.5743, 0.8828],
]
HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]
OPTIMIZER_OFFSET = {"adam": 0.0, "sgd": 0.8, "rmsprop": 0.4}


def hartmann_opt(c):
    t = [(math.log10(c["lr"]) + 4) / 3, c["u"], c["v"]]
    total = 0.0
    for i in range(4):
        inner = sum(HARTMANN_A[i][j] * (t[j] - HARTMANN_P[i][j]) ** 2 for j in range(3))
        total -= HARTMANN_ALPHA[i] * math.exp(-inner)
    return total + OPTIMIZER_OFFSET[c["optimizer"]]


FUNCTIONS = {
    "forrester-1d": (forrester, 0.5, {"x": {"min": 0.0, "max": 1.0}}),
    "branin-2d": (branin, 1.0, {"x1": {"min": -5.0, "max": 10.0}, "x2": {"min": 0.0, "max": 15.0}}),
    "hartmann-4d-categorical": (
        hartmann_opt,
        0.1,
        {
            "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
            "u": {"min": 0.0, "max": 1.0},
            "v": {"min": 0.0, "max": 1.0},
            "optimizer": {"values": ["adam", "sgd", "rmsprop"]},
        },
    ),
}


def run_sweep(name, max_live, budgets, seed):
    """The best value among the first b members, for each budget b (one sweep of the largest:
    its first b members are the sweep of budget b)."""
    budget = max(budgets)
    f, noise, params = FUNCTIONS[name]
    config = {"method": "bayes", "metric": {"name": "loss", "goal": "minimize"}, "parameters": params}
    np.random.seed(seed)
    noise_rng = np.random.RandomState(10_000 + seed)
    runs = []  # every member, in order
    in_flight = []  # indices into runs, oldest first
    true_values = []

    def suggest(n):
        for run in bayes_search.bayes_search_next_runs(runs, config, n=n):
            config_values = {k: v["value"] for k, v in run.config.items()}
            runs.append(SweepRun(name=f"r{len(runs)}", state=RunState.running, config=run.config))
            in_flight.append(len(runs) - 1)
            true_values.append(f(config_values))

    suggest(min(max_live, budget))
    while in_flight:
        done = in_flight.pop(0)
        observed = true_values[done] + noise * noise_rng.normal()
        runs[done].state = RunState.finished
        runs[done].summary_metrics = {"loss": observed}
        runs[done].history = [{"loss": observed}]
        if len(runs) < budget:
            suggest(1)
    return [min(true_values[:b]) for b in budgets]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--budgets", default="20,40")
    parser.add_argument("--max-live", default="1,4")
    args = parser.parse_args()
    out = {}
    for name in FUNCTIONS:
        for max_live in [int(x) for x in args.max_live.split(",")]:
            budgets = [int(x) for x in args.budgets.split(",")]
            bests = [run_sweep(name, max_live, budgets, seed) for seed in range(args.seeds)]
            for i, budget in enumerate(budgets):
                column = [row[i] for row in bests]
                out.setdefault(name, {}).setdefault(str(max_live), {})[str(budget)] = column
                print(f"{name} max_live {max_live} budget {budget}: median {np.median(column):.4f}", file=sys.stderr)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
