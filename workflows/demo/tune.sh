# Stands in for a trainer whose reward depends on its learning rate (best at 1e-3): prints
# `step i/N reward=R` for each step, as the demo-tune workflow's metrics pattern reads it, then
# where its (pretend) weights are, as a Tinker trainer would.
lr=${1:-0.001}
steps=${2:-20}
i=1
while [ "$i" -le "$steps" ]; do
  sleep 0.5
  awk -v lr="$lr" -v i="$i" -v n="$steps" 'BEGIN {
    d = log(lr) / log(10) + 3; if (d < 0) d = -d
    printf "step %d/%d reward=%.4f\n", i, n, (1 - 0.3 * d) * (1 - exp(-i / 3))
  }'
  i=$((i + 1))
done
echo "Saved weights: tinker://demo-tune/lr-$lr/final"
echo "Training complete!"
