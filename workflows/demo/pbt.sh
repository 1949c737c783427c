# Stands in for a trainer whose best learning rate moves as it trains (from 1e-2 at the start to
# 1e-4 at the end), so no fixed lr is best throughout: what the demo pbt sweep
# (sweeps/demo-pbt.yaml) is for. Its state is its reward, kept in a checkpoint file every 4 steps;
# started with `--from PATH STEP` (another member's checkpoint, or its own), it goes on from
# there with the lr it was given.
dir=$1 lr=$2 steps=$3
step=0 reward=0
if [ "${4:-}" = --from ]; then
  reward=$(cat "$5") step=$6
  echo "continuing from $5 at step $step (reward $reward) with lr $lr"
fi
while [ "$step" -lt "$steps" ]; do
  step=$((step + 1))
  reward=$(awk -v lr="$lr" -v i="$step" -v n="$steps" -v r="$reward" 'BEGIN {
    best = -2 - 2 * i / n; d = log(lr) / log(10) - best; if (d < 0) d = -d
    gain = 1 - 0.5 * d; if (gain < 0) gain = 0
    printf "%.4f", r + gain
  }')
  echo "step $step/$steps reward=$reward"
  printf '{"step": %d, "reward": %s}\n' "$step" "$reward" >>"$dir/metrics.jsonl"
  if [ $((step % 4)) -eq 0 ]; then
    echo "$reward" >"$dir/ckpt-$step"
    printf '{"step": %d, "path": "%s"}\n' "$step" "$dir/ckpt-$step" >>"$dir/checkpoints.jsonl"
  fi
  sleep 0.2
done
echo "Training complete!"
