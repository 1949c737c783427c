#!/bin/sh
# Stands in for `{python}` in the tinker-verifiers workflow's tests. The workflow's own argv,
# `-m tinker_cookbook.recipes.verifiers_rl.train KEY=VALUE...`, runs the stand-in recipe
# (tests/python/verifiers_trainer.py) on the real tinker-cookbook's code (LACHESIS_TEST_COOKBOOK,
# from tests/python/cookbook.sh); anything else runs the test venv's Python. What the stage put
# on PYTHONPATH (the environment's import directory) stays on it, after the cookbook.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
python="${LACHESIS_TEST_PYTHON:?the test venv's python}"
if [ "$1" = -m ] && [ "$2" = tinker_cookbook.recipes.verifiers_rl.train ]; then
  shift 2
  PYTHONPATH="${LACHESIS_TEST_COOKBOOK:?the tinker-cookbook dir}${PYTHONPATH:+:$PYTHONPATH}" \
    exec "$python" "$here/../python/verifiers_trainer.py" "$@"
fi
exec "$python" "$@"
