"""A stand-in for tinker-cookbook's verifiers recipe (tinker_cookbook.recipes.verifiers_rl.train,
0.6.1), for the training tier: it takes the recipe's `key=value` arguments as chz does, and does
what the recipe does with them before its hosted part:
- `cli_utils.check_log_dir(log_path, behavior_if_log_dir_exists)`, the cookbook's own (`ask`
  would read the closed stdin and fail a retry);
- loads the environment as `verifiers.load_environment(vf_env_id, **json.loads(vf_env_args))`
  does: imports the module `vf_env_id` names (dashes as underscores) and calls its
  `load_environment` with those arguments;
then trains as cookbook_trainer.py does (the real checkpoint_utils and metrics store; only the
Tinker service stands in): `max_steps` batches (10 when None), a checkpoint every `save_every`,
and each row's `env/all/reward/total` growing with the step and the learning rate, so a sweep
over `learning_rate` has a winner. With VF_STANDIN_FAIL_AT=N its first attempt exits 75 in
batch N. Every attempt appends what it was given and what the environment answered to
`<log_path>/attempts.jsonl`.

usage: verifiers_trainer.py KEY=VALUE...   (tests/trainers/verifiers_python.sh runs it for
`python -m tinker_cookbook.recipes.verifiers_rl.train KEY=VALUE...`)
"""

import importlib
import json
import os
import sys
from pathlib import Path

from tinker_cookbook import cli_utils

import cookbook_trainer


def optional_int(text: str) -> int | None:
    return None if text == "None" else int(text)


def main() -> None:
    args = dict(arg.split("=", 1) for arg in sys.argv[1:])
    log_path = Path(args["log_path"])
    cli_utils.check_log_dir(str(log_path), behavior_if_exists=args["behavior_if_log_dir_exists"])
    env_args = json.loads(args.get("vf_env_args") or "{}")
    module = importlib.import_module(args["vf_env_id"].replace("-", "_").split("/")[-1])
    loaded = module.load_environment(**env_args)
    log_path.mkdir(parents=True, exist_ok=True)
    attempt = {
        "argv": sys.argv[1:],
        "env_args": env_args,
        "loaded": loaded,
        "module": module.__file__,
        "resume_step": os.environ.get("LACHESIS_RESUME_STEP"),
        "resume_path": os.environ.get("LACHESIS_RESUME_PATH"),
    }
    with open(log_path / "attempts.jsonl", "a", encoding="utf-8") as attempts:
        attempts.write(json.dumps(attempt) + "\n")
    batches = optional_int(args.get("max_steps", "None")) or 10
    rate = float(args["learning_rate"])
    fail_at = os.environ.get("VF_STANDIN_FAIL_AT")
    cookbook_trainer.train(
        log_path,
        batches=batches,
        save_every=int(args["save_every"]),
        fail_at=int(fail_at) if fail_at else None,
        metrics=lambda i: {"env/all/reward/total": min(1.0, rate * 1e4 * (i + 1) / batches)},
    )


if __name__ == "__main__":
    main()
