#!/usr/bin/env bash
# Install (once) the real tinker-cookbook beside the test venv, for the checkpoints tier, and
# print the directory to put on PYTHONPATH.
#
# Not in requirements.lock: tinker-cookbook requires torch and more (gigabytes), and its
# checkpoint code (checkpoint_utils, stores) needs none of that. It imports `tinker` (the SDK),
# which needs orjson beyond what the venv has. So the three are installed with --no-deps into a
# directory of their own; the venv's pip check is not disturbed. Progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(bash "$here/venv.sh" --dir)"
dir="$venv/tinker-cookbook-0.6.1"
if [[ -f "$dir/.lachesis-complete" ]]; then
  echo "$dir"
  exit 0
fi
tmp="$(mktemp -d "$venv/.cookbook.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "cookbook.sh: installing tinker-cookbook 0.6.1 (its checkpoint code) into $dir" >&2
"$venv/bin/python" -m pip install --no-deps --no-input --disable-pip-version-check --progress-bar off -q \
  --target "$tmp" tinker-cookbook==0.6.1 tinker==0.38.0 orjson==3.11.5 >&2
PYTHONPATH="$tmp" "$venv/bin/python" -c 'import tinker_cookbook.checkpoint_utils, tinker_cookbook.stores.training_store' >&2
touch "$tmp/.lachesis-complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
