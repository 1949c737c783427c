#!/bin/sh
# A stand-in for a tinker-cookbook RL recipe (tinker_cookbook/rl/train.py, 0.6.1), writing its
# line formats to $1/metrics.jsonl and $1/checkpoints.jsonl the way it does, 10 batches in all:
# - iteration i (from 0) first saves a checkpoint when i is past the start and even (save_every
#   2), with `batch` i: the batch to train next, so a resumed run starts at it;
# - then logs its metrics row `step` i (`progress/done_frac` (i+1)/10);
# - after the last, a metrics row at step 10 and the `final` checkpoint at batch 10.
# Resuming (LACHESIS_RESUME_STEP, where the cookbook reads its own checkpoints.jsonl), it drops
# the metrics rows from that step on, as the cookbook does: the old file copied aside, a new one
# renamed over it. Its first attempt (not resuming, nothing in attempts.txt before it) fails in
# iteration 7, after the checkpoint at 6: with
# `exit` it exits 75 (a hosted service's transient error), with `stall` it stops moving.
# Each attempt appends what it was handed to $1/attempts.txt.
set -e
dir="$1"; failure="$2"; shift 2
mkdir -p "$dir"
start="${LACHESIS_RESUME_STEP:-0}"
echo "start=$start path=${LACHESIS_RESUME_PATH:-} args=$*" >> "$dir/attempts.txt"
metrics="$dir/metrics.jsonl"
if [ "$start" -gt 0 ] && [ -f "$metrics" ]; then
  cp "$metrics" "$metrics.pre_resume_$(printf '%06d' "$start")"
  awk -v from="$start" 'match($0, /"step": [0-9]+/) && substr($0, RSTART + 8, RLENGTH - 8) + 0 >= from { next } { print }' \
    "$metrics" > "$dir/.metrics.jsonl.$$.tmp"
  mv "$dir/.metrics.jsonl.$$.tmp" "$metrics"
fi
checkpoint() {
  printf '{"name": "%s", "batch": %d, "epoch": 0, "final": %s, "state_path": "tinker://standin/weights/%s", "sampler_path": "tinker://standin/sampler_weights/%s"}\n' \
    "$1" "$2" "$3" "$1" "$1" >> "$dir/checkpoints.jsonl"
}
i=$start
while [ "$i" -lt 10 ]; do
  if [ "$i" -gt "$start" ] && [ $((i % 2)) -eq 0 ]; then
    checkpoint "$(printf '%06d' "$i")" "$i" false
  fi
  if [ "$i" -eq 7 ] && [ -z "${LACHESIS_RESUME_STEP:-}" ] && [ "$(wc -l < "$dir/attempts.txt")" -eq 1 ]; then
    case "$failure" in
      exit) exit 75 ;;
      stall) sleep 600 ;;
    esac
  fi
  sleep 0.1
  frac=$(awk -v i="$i" 'BEGIN { printf "%.1f", (i + 1) / 10 }')
  printf '{"step": %d, "progress/batch": %d, "progress/done_frac": %s, "env/all/reward/total": 0.5}\n' \
    "$i" "$i" "$frac" >> "$metrics"
  i=$((i + 1))
done
printf '{"step": 10, "usage/sampled_tokens": 1000}\n' >> "$metrics"
checkpoint final 10 true
