# Stands in for the trainer: a few steps, then done.
steps=${1:-5}
i=1
while [ "$i" -le "$steps" ]; do
  sleep 0.4
  echo "Step $i/$steps"
  echo "Loss: 0.$((100 - i * 7))"
  i=$((i + 1))
done
echo "Training complete!"
