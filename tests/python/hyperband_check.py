"""W&B's own answers, from its `sweeps` package, for tests/it/sweep_reference.rs to compare.

Reads one JSON document on stdin:
  {"hyperband": [{"config": {...sweep config...}, "runs": [{"name", "state", "history": [..]}]}],
   "grid": [{"config": {...}, "paths": ["a", "opt.lr", ...]}],
   "floats": [x, ...]}
History values "nan", "inf" and "-inf" stand for those floats (JSON has none). Writes
  {"hyperband": [[names to stop], ...], "grid": [[[value per path] per member], ...],
   "floats": [repr(x), ...]}
Values keep their Python type: an int is written as an int, a float as a float.
"""

import json
import sys
import warnings

warnings.simplefilter("ignore")

from sweeps.grid_search import grid_search_next_runs  # noqa: E402
from sweeps.hyperband_stopping import hyperband_stop_runs  # noqa: E402
from sweeps.run import RunState, SweepRun  # noqa: E402

SPECIAL = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def reading(value):
    return SPECIAL.get(value, value) if isinstance(value, str) else value


def hyperband(case):
    runs = [
        SweepRun(
            name=run["name"],
            state=RunState(run["state"]),
            history=[{"m": reading(v)} for v in run["history"]],
        )
        for run in case["runs"]
    ]
    try:
        return [run.name for run in hyperband_stop_runs(runs, case["config"])]
    except ValueError as err:
        return {"error": str(err)}


def typed(value):
    # bool before int: True is an int in Python.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": repr(value)}
    return {"other": value}


def grid(case):
    members = []
    for run in grid_search_next_runs([], case["config"], n=case["limit"] + 1):
        if run is None:
            break
        row = []
        for path in case["paths"]:
            head, *rest = path.split(".")
            value = run.config[head]["value"]
            for part in rest:
                value = value[part]
            row.append(typed(value))
        members.append(row)
    return members


def main():
    request = json.load(sys.stdin)
    answer = {
        "hyperband": [hyperband(case) for case in request.get("hyperband", [])],
        "grid": [grid(case) for case in request.get("grid", [])],
        "floats": [repr(float(x)) for x in request.get("floats", [])],
    }
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
