# Stands in for the trainer: loads, trains a few steps, then is done.
steps=${1:-5}
echo "Loading model (demo)..."
sleep 1
i=1
while [ "$i" -le "$steps" ]; do
  sleep 0.4
  echo "Step $i/$steps"
  echo "Loss: 0.$((100 - i * 7))"
  i=$((i + 1))
done
echo "Saved weights: tinker://demo/final"
echo "Training complete!"
