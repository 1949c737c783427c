"""Stand-in for tinker-atropos' `launch_training.py --config C`, for tests without Tinker.

Reads the same YAML the environment gets and keeps the real trainer's observable behaviour:
- serves inference for the env (here: the stub server, default port 8001 like the real one);
- registers with run-api (`POST {env.rollout_server_url}/register`) using the same fields and
  sources as the real trainer: batch_size = env.batch_size, num_steps = env.total_steps,
  max_token_len = tinker.max_token_trainer_length, checkpoint_dir / save_checkpoint_interval /
  wandb_project / wandb_group from `tinker:`;
- runs num_steps steps, each polling `GET /batch` until a batch arrives, printing the real
  trainer's lines: `Step {i}/{N}` (i counts from 0, as upstream does), `Loss: {x}`,
  `Reward/mean: {r}`, then `Training complete!` and
  `Final weights are available here: tinker://<id>/sampler_weights/final`; exits 0.

    python stand_in_trainer.py --config run.yaml [--port 8001] [--num-steps N]

Environment: STAND_IN_TRAINER_PORT (inference port when --port is absent),
STAND_IN_TRAINER_CRASH_AFTER=K (exit 3 right after step K completes, K >= 0; 0 = before any step),
STAND_IN_TRAINER_HANG_MODEL=NAME (its inference server never answers completions for NAME, or
for any request with `*`: the environment waits forever, as with inference down; /health still
answers).
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stub_inference import make_server, serve_in_thread  # noqa: E402

POLL_INTERVAL = 0.2  # the real trainer sleeps 1 s between empty polls; tests want to be quick
REGISTER_WAIT = 10.0  # run-api should already be up when the trainer starts; don't wait long
CRASH_EXIT_CODE = 3


def http_json(method, url, payload=None, timeout=10.0):
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def register(api_url, payload):
    deadline = time.monotonic() + REGISTER_WAIT
    while True:
        try:
            return http_json("POST", f"{api_url}/register", payload)["uuid"]
        except (urllib.error.URLError, ConnectionError) as e:
            if time.monotonic() > deadline:
                print(f"Error: could not register with run-api at {api_url}: {e}", flush=True)
                sys.exit(1)
            time.sleep(POLL_INTERVAL)


def wait_for_batch(api_url):
    while True:
        try:
            batch = http_json("GET", f"{api_url}/batch").get("batch")
        except (urllib.error.URLError, ConnectionError) as e:
            # Upstream logs the error, breaks out and still prints "Training complete!" with
            # exit 0; the stand-in fails loudly instead.
            print(f"Error: lost run-api at {api_url}: {e}", flush=True)
            sys.exit(1)
        if batch:
            return batch
        time.sleep(POLL_INTERVAL)


def main():
    parser = argparse.ArgumentParser(description="stand-in for tinker-atropos launch_training.py")
    parser.add_argument("--config", required=True, help="YAML with env:, openai:, tinker: keys")
    parser.add_argument("--port", type=int,
                        default=int(os.environ.get("STAND_IN_TRAINER_PORT", "8001")),
                        help="inference port (default $STAND_IN_TRAINER_PORT or 8001)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--num-steps", type=int, help="override env.total_steps")
    args = parser.parse_args()

    print(f"Loading config from: {args.config}", flush=True)
    config = yaml.safe_load(Path(args.config).read_text()) or {}
    env, tinker = config.get("env") or {}, config.get("tinker") or {}
    # Defaults are the real trainer's (tinker_atropos/config.py).
    api_url = str(env.get("rollout_server_url", "http://localhost:8000")).rstrip("/")
    num_steps = args.num_steps if args.num_steps is not None else int(env.get("total_steps", 50))
    crash_after = os.environ.get("STAND_IN_TRAINER_CRASH_AFTER")
    crash_after = int(crash_after) if crash_after not in (None, "") else None

    # The env's tokenizer if it is a local dir (tests), else the stub's default one.
    tokenizer = str(env.get("tokenizer_name", ""))
    hang = tuple(m for m in [os.environ.get("STAND_IN_TRAINER_HANG_MODEL", "")] if m)
    server = make_server(args.host, args.port, model=tokenizer or "stub",
                         tokenizer_dir=tokenizer if Path(tokenizer).is_dir() else None,
                         hang_models=hang)
    serve_in_thread(server)
    print(f"Starting inference server on port {server.server_address[1]}...", flush=True)

    trainer_id = register(api_url, {
        "wandb_project": tinker.get("wandb_project", "atropos-tinker"),
        "wandb_group": tinker.get("wandb_group") or f"stand-in-{uuid.uuid4().hex[:8]}",
        "batch_size": int(env.get("batch_size", 128)),
        "max_token_len": int(tinker.get("max_token_trainer_length", 2048)),
        "starting_step": 0,
        "checkpoint_dir": str(tinker.get("checkpoint_dir", "./temp/")),
        "save_checkpoint_interval": int(tinker.get("save_checkpoint_interval", 0)),
        "num_steps": num_steps,
    })
    print(f"Registered as trainer: {trainer_id}", flush=True)
    if crash_after == 0:
        print("Simulated crash before the first step", flush=True)
        sys.exit(CRASH_EXIT_CODE)

    for step in range(num_steps):
        print(f"Step {step}/{num_steps}", flush=True)
        batch = wait_for_batch(api_url)
        scores = [s for group in batch for s in group["scores"]]
        reward = sum(scores) / len(scores)
        loss = round(1.0 - reward, 4)  # deterministic, falls as reward rises; nothing is trained
        print(f"Got {len(scores)} sequences in {len(batch)} groups", flush=True)
        print(f"Loss: {loss}", flush=True)
        print(f"Reward/mean: {reward:.4f}", flush=True)
        print(f"Step {step} complete - Loss: {loss}", flush=True)
        if crash_after is not None and step + 1 >= crash_after:
            print(f"Simulated crash after {step + 1} step(s)", flush=True)
            sys.exit(CRASH_EXIT_CODE)

    print("Training complete!", flush=True)
    print(f"Final weights are available here: tinker://stand-in-{trainer_id}/sampler_weights/final",
          flush=True)


if __name__ == "__main__":
    main()
