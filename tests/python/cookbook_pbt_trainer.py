"""A pbt member written with tinker-cookbook's own code (0.6.1), for the pbt sweep's test.

It resumes as the cookbook's RL recipe does (behavior_if_log_dir_exists=resume): from
`checkpoint_utils.get_last_checkpoint(log_path)`, dropping the metrics rows from that batch on.
Its reward grows by LR each batch; the reward so far is carried in each checkpoint's name (so
in its tinker:// path, as a real state would be), which makes a run that continues from another
run's checkpoint continue from that run's reward. Only the Tinker service is a stand-in
(cookbook_trainer.StandInTrainingClient).

usage: cookbook_pbt_trainer.py LOG_PATH LR RUN_ID
"""

import sys
import time
from pathlib import Path

from cookbook_trainer import StandInTrainingClient
from tinker_cookbook import checkpoint_utils
from tinker_cookbook.stores.storage import LocalStorage
from tinker_cookbook.stores.training_store import TrainingRunStore

BATCHES = 40
SAVE_EVERY = 5


def main() -> None:
    log_path, lr, run = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    log_path.mkdir(parents=True, exist_ok=True)
    store = TrainingRunStore(LocalStorage(log_path))
    client = StandInTrainingClient()
    resume = checkpoint_utils.get_last_checkpoint(str(log_path))
    start, reward = 0, 0
    if resume is not None:
        start = resume.batch
        reward = int(resume.state_path.rsplit("-r", 1)[1])
        store.truncate_metrics(start)
    print(f"cookbook resumes at batch {start} ({resume.state_path if resume else 'scratch'}) with lr {lr}", flush=True)
    for i in range(start, BATCHES):
        if i > start and i % SAVE_EVERY == 0:
            checkpoint_utils.save_checkpoint(
                client, name=f"{run}-{i:06d}-r{reward}", log_path=str(log_path), loop_state={"batch": i}, kind="both"
            )
        reward += lr
        time.sleep(0.1)
        store.write_metrics({"env/all/reward/total": reward, "progress/done_frac": (i + 1) / BATCHES}, step=i)


if __name__ == "__main__":
    main()
