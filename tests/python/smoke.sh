#!/usr/bin/env bash
# End-to-end check of the Python test tier against the real atroposlib, all on 127.0.0.1, offline.
#
#   bash tests/python/smoke.sh [STEP...]
#
# Steps (default: process serve-config serve-flags):
#   process         stub + `arith_env.py process` (sglang /generate path) -> 2 JSONL groups, mixed scores
#   process-openai  the same through the OpenAI chat path (what inference tests against hosted models use)
#   serve-config    run-api + stand_in_trainer + `arith_env.py serve --config run.yaml` -> both exit 0
#   serve-flags     the same, the env configured by --env.* / --openai.* flags instead of the YAML
#   crash           STAND_IN_TRAINER_CRASH_AFTER=1 -> trainer exits 3 after one step; env keeps running
#   hang            stub --mode hang -> `process` makes no progress and never exits (killed after 20 s)
# Every wait has a deadline; everything started is killed on exit. Logs stay in $work on failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="$(bash "$here/venv.sh")"
tokenizer="$(bash "$here/venv.sh" --tokenizer)"
bin="$(dirname "$py")"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
work="$(mktemp -d "${TMPDIR:-/tmp}/lachesis-smoke.XXXXXX")"
pids=()
ok=0

cleanup() {
  # Each process was started with setsid, so its pid is its process group: kill the whole group.
  # pids holds only processes not yet reaped, so a recycled pid is never signalled.
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((ok)); then rm -rf "$work"; else echo "smoke: logs kept in $work" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM # run the EXIT trap on a signal too

log() { echo "smoke: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

# start NAME CMD...: run CMD in its own session, output to $work/NAME.log; pid in $last_pid.
start() {
  local name=$1; shift
  : >"$work/$name.log" # exists before anyone greps it
  setsid "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}

# A zombie still answers kill -0, so read the state from /proc instead.
exited() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  stat="${stat##*) }"
  [[ "${stat%% *}" == Z ]]
}

# wait_until SECONDS WHAT CMD...: poll CMD until it succeeds or the deadline passes.
wait_until() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after $limit s waiting for $what"
    sleep 0.2
  done
}

reaped() {
  local keep=() pid
  for pid in "${pids[@]}"; do [[ $pid == "$1" ]] || keep+=("$pid"); done
  pids=("${keep[@]}")
}

# wait_exit PID SECONDS NAME: wait for PID to exit, set $rc to its exit code.
wait_exit() {
  wait_until "$2" "$3 to exit" exited "$1"
  rc=0
  wait "$1" || rc=$?
  reaped "$1"
}

# stop PID: SIGTERM its process group and reap it (TERM is enough for all of these).
stop() {
  kill -TERM -- "-$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  reaped "$1"
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_stub NAME [ARGS...]: start the stub on a free port, set $stub_port once it is listening.
start_stub() {
  local name=$1; shift
  start "$name" "$py" "$here/stub_inference.py" --port 0 "$@"
  stub_pid=$last_pid
  wait_until 20 "$name to listen" grep -q '^READY ' "$work/$name.log"
  stub_port="$(awk '/^READY /{print $2; exit}' "$work/$name.log")"
}

# check_groups FILE N: FILE has N JSON lines whose scores include both > 0 and <= 0.
check_groups() {
  "$py" - "$1" "$2" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == int(sys.argv[2]), f"{len(lines)} groups, wanted {sys.argv[2]}"
scores = [s for line in lines for s in json.loads(line)["scores"]]
assert any(s > 0 for s in scores) and any(s <= 0 for s in scores), f"scores not mixed: {scores}"
print(f"smoke:   {len(lines)} groups, scores {scores}", file=sys.stderr)
EOF
}

step_process() {
  local server_type=${1:-sglang}
  start_stub "stub-$server_type"
  local out="$work/process-$server_type/out.jsonl"
  rc=0
  timeout 120 "$py" "$here/envs/arith_env.py" process \
    --env.total_steps 2 --env.group_size 4 --env.use_wandb false \
    --env.data_path_to_save_groups "$out" \
    --openai.base_url "http://127.0.0.1:$stub_port/v1" --openai.server_type "$server_type" \
    >"$work/process-$server_type.log" 2>&1 || rc=$?
  ((rc == 0)) || fail "process ($server_type) exited $rc, see $work/process-$server_type.log"
  check_groups "$out" 2 || fail "bad output in $out"
  stop "$stub_pid"
}

# write_config FILE API_PORT INFERENCE_PORT: the YAML a supervisor writes for one run.
write_config() {
  cat >"$1" <<EOF
env:
  tokenizer_name: $tokenizer
  rollout_server_url: http://127.0.0.1:$2
  total_steps: 2
  group_size: 4
  batch_size: 8
  max_token_length: 256
  use_wandb: false
  wandb_name: arith
openai:
  - model_name: stub
    base_url: http://127.0.0.1:$3/v1
    api_key: x
    server_type: sglang
    tokenizer_name: $tokenizer
tinker:
  lora_rank: 32
  learning_rate: 0.00004
  max_token_trainer_length: 2048
  checkpoint_dir: $work/checkpoints/
  save_checkpoint_interval: 0
  wandb_project: lachesis-smoke
EOF
}

# start_loop NAME [TRAINER_ENV...] -- sets api_pid, trainer_pid, env_pid.
# The env is configured by the YAML (NAME=serve-config) or by flags (anything else).
start_loop() {
  local name=$1; shift
  local api_port inference_port config="$work/$name.yaml"
  api_port="$(free_port)"
  inference_port="$(free_port)"
  write_config "$config" "$api_port" "$inference_port"
  start "$name-api" "$bin/run-api" --host 127.0.0.1 --port "$api_port"
  api_pid=$last_pid
  wait_until 30 "run-api on $api_port" curl -sf -o /dev/null "http://127.0.0.1:$api_port/"
  start "$name-trainer" env "$@" "$py" "$here/stand_in_trainer.py" --config "$config" \
    --port "$inference_port"
  trainer_pid=$last_pid
  if [[ $name == serve-config ]]; then
    start "$name-env" "$py" "$here/envs/arith_env.py" serve --config "$config"
  else
    start "$name-env" "$py" "$here/envs/arith_env.py" serve \
      --env.rollout_server_url "http://127.0.0.1:$api_port" --env.tokenizer_name "$tokenizer" \
      --env.total_steps 2 --env.group_size 4 --env.use_wandb false \
      --openai.base_url "http://127.0.0.1:$inference_port/v1" --openai.server_type sglang \
      --openai.tokenizer_name "$tokenizer" --openai.api_key x
  fi
  env_pid=$last_pid
}

step_serve() {
  local name=$1
  start_loop "$name"
  wait_exit "$trainer_pid" 120 "trainer"
  ((rc == 0)) || fail "trainer exited $rc, see $work/$name-trainer.log"
  grep -q '^Training complete!$' "$work/$name-trainer.log" || fail "no 'Training complete!'"
  wait_exit "$env_pid" 60 "env"
  ((rc == 0)) || fail "env exited $rc, see $work/$name-env.log"
  log "  trainer: $(grep -c '^Step [0-9]*/' "$work/$name-trainer.log") steps, exit 0; env exit 0"
  stop "$api_pid"
}

step_crash() {
  start_loop crash STAND_IN_TRAINER_CRASH_AFTER=1
  wait_exit "$trainer_pid" 120 "trainer"
  ((rc == 3)) || fail "trainer exited $rc, wanted 3"
  ! grep -q 'Training complete!' "$work/crash-trainer.log" || fail "crashed trainer completed"
  # Nobody pulls batches any more: the env fills run-api's queue and waits forever.
  exited "$env_pid" && fail "env exited although the trainer crashed"
  log "  trainer exit 3 after $(grep -c '^Step [0-9]*/' "$work/crash-trainer.log") step; env still running"
  stop "$env_pid"
  stop "$trainer_pid"
  stop "$api_pid"
}

step_hang() {
  start_stub stub-hang --mode hang
  local out="$work/hang/out.jsonl"
  start hang-env "$py" "$here/envs/arith_env.py" process \
    --env.total_steps 2 --env.group_size 4 --env.use_wandb false \
    --env.data_path_to_save_groups "$out" --openai.base_url "http://127.0.0.1:$stub_port/v1"
  local env_pid=$last_pid deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    exited "$env_pid" && fail "process against a hung server exited"
    sleep 0.5
  done
  [[ ! -s $out ]] || fail "process wrote groups against a hung server"
  log "  still running after 20 s with no output: killing it"
  stop "$env_pid"
  stop "$stub_pid"
}

steps=("$@")
((${#steps[@]})) || steps=(process serve-config serve-flags)
for step in "${steps[@]}"; do
  started=$EPOCHREALTIME
  log "$step ..."
  case "$step" in
    process) step_process sglang ;;
    process-openai) step_process openai ;;
    serve-config | serve-flags) step_serve "$step" ;;
    crash) step_crash ;;
    hang) step_hang ;;
    *) fail "unknown step $step" ;;
  esac
  log "$step ok ($(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $started }") s)"
done
ok=1
log "all ok: ${steps[*]}"
