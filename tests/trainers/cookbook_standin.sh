#!/bin/sh
# A stand-in for a tinker-cookbook RL recipe: it writes the cookbook's line formats to
# $1/metrics.jsonl and $1/checkpoints.jsonl (a checkpoint every 2 steps, 10 steps in all) and
# starts at $LACHESIS_RESUME_STEP when given one. Its first attempt fails at step 7: with
# `exit` it exits 75 (a hosted service's transient error), with `stall` it stops moving.
# Each attempt appends what it was handed to $1/attempts.txt.
set -e
dir="$1"; failure="$2"; shift 2
mkdir -p "$dir"
start="${LACHESIS_RESUME_STEP:-0}"
echo "start=$start path=${LACHESIS_RESUME_PATH:-} args=$*" >> "$dir/attempts.txt"
i=$start
while [ "$i" -lt 10 ]; do
  i=$((i + 1))
  sleep 0.1
  frac="0.$i"; [ "$i" -eq 10 ] && frac="1.0"
  printf '{"step": %d, "progress/done_frac": %s, "env/all/reward/total": 0.5}\n' "$i" "$frac" >> "$dir/metrics.jsonl"
  if [ $((i % 2)) -eq 0 ]; then
    name=$(printf '%06d' "$i")
    printf '{"name": "%s", "batch": %d, "epoch": 0, "final": false, "state_path": "tinker://standin/weights/%s", "sampler_path": "tinker://standin/sampler_weights/%s"}\n' \
      "$name" "$i" "$name" "$name" >> "$dir/checkpoints.jsonl"
  fi
  if [ "$i" -eq 7 ] && [ "$(wc -l < "$dir/attempts.txt")" -eq 1 ]; then
    case "$failure" in
      exit) exit 75 ;;
      stall) sleep 600 ;;
    esac
  fi
done
