# Stands in for an inference test of trained weights: says what it tests, and passes.
weights=${1:-}
if [ -z "$weights" ]; then echo "eval: no weights given"; exit 2; fi
echo "eval: testing $weights (trainer run ${LACHESIS_AFTER_TRAIN_RUN_ID:-?})"
sleep 0.2
echo "eval: accuracy 0.42"
