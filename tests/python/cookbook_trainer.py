"""A small trainer written with tinker-cookbook's own code (0.6.1), for the checkpoints tier.

Its loop is the shape of the cookbook's RL recipe (tinker_cookbook/rl/train.py): iteration i
first saves a checkpoint (`batch` i, the batch to train next) when past its start and due,
then logs its metrics row at step i; after the last, a row at step BATCHES and the `final`
checkpoint. Checkpoints go through the real `checkpoint_utils.save_checkpoint`, metrics through
the real `TrainingRunStore`, and it resumes itself the way the cookbook does
(behavior_if_log_dir_exists=resume): from `checkpoint_utils.get_last_checkpoint(log_path)`,
dropping the metrics rows from that step on. Only the Tinker service is a stand-in: the two
calls checkpoint_utils makes on a training client, answered with tinker:// paths.

usage: cookbook_trainer.py LOG_PATH   (its first run exits 75 in batch 7, after the checkpoint
at 6, as a hosted service's transient error would end it). verifiers_trainer.py runs `train`
with a recipe's own arguments.
"""

import os
import sys
import time
from pathlib import Path

from tinker_cookbook import checkpoint_utils
from tinker_cookbook.stores.storage import LocalStorage
from tinker_cookbook.stores.training_store import TrainingRunStore

BATCHES = 10
SAVE_EVERY = 2


class Saved:
    """What a save on the Tinker service answers: the checkpoint's path."""

    def __init__(self, path: str) -> None:
        self.path = path


class StandInTrainingClient:
    """`save_state` and `save_weights_for_sampler`, as tinker.TrainingClient has them."""

    async def _saved(self, kind: str, name: str) -> Saved:
        return Saved(f"tinker://cookbook/{kind}/{name}")

    def save_state(self, name: str, ttl_seconds: int | None = None):
        return self._saved("weights", name)

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None):
        return self._saved("sampler_weights", name)


def train(log_path: Path, batches: int = BATCHES, save_every: int = SAVE_EVERY, fail_at: int | None = 7,
          metrics=lambda i: {}) -> None:
    """The recipe's loop: resumed from its own last checkpoint in `log_path`; the first run
    exits 75 in batch `fail_at` (None: never); `metrics(i)` adds to each batch's row."""
    log_path.mkdir(parents=True, exist_ok=True)
    store = TrainingRunStore(LocalStorage(log_path))
    client = StandInTrainingClient()
    resume = checkpoint_utils.get_last_checkpoint(str(log_path))
    start = 0
    if resume is not None:
        start = resume.batch
        store.truncate_metrics(start)
    # What lachesis handed this attempt, beside what the cookbook found on its own.
    print(
        f"cookbook resumes at batch {start} ({resume.state_path if resume else 'scratch'}); "
        f"LACHESIS_RESUME_STEP={os.environ.get('LACHESIS_RESUME_STEP', '')}",
        flush=True,
    )
    failed_once = log_path / "failed-once"
    for i in range(start, batches):
        if i > start and i % save_every == 0:
            checkpoint_utils.save_checkpoint(
                client, name=f"{i:06d}", log_path=str(log_path), loop_state={"batch": i}, kind="both"
            )
        if i == fail_at and not failed_once.exists():
            failed_once.touch()
            print("the service went away", flush=True)
            sys.exit(75)
        time.sleep(0.1)
        row = {"progress/batch": i, "progress/done_frac": (i + 1) / batches, **metrics(i)}
        store.write_metrics(row, step=i)
    store.write_metrics({"usage/sampled_tokens": 1000}, step=batches)
    checkpoint_utils.save_checkpoint(
        client, name="final", log_path=str(log_path), loop_state={"batch": batches, "final": True}, kind="both"
    )


def main() -> None:
    train(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
