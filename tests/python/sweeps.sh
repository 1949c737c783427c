#!/usr/bin/env bash
# Create (once) and locate the venv holding W&B's `sweeps` package (tests/python/sweeps.lock),
# whose decisions tests/it/sweep_reference.rs compares with lachesis' own. Prints the venv's
# python; progress goes to stderr.
#
# Not in requirements.lock: sweeps needs numpy<2 and the Atropos tier has numpy 2. The venv
# lives at ${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}/sweeps-<12 hex of
# sha256(sweeps.lock)> (about 150 MB, a minute on first use), reused while the lock is unchanged.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="$here/sweeps.lock"
key="$(sha256sum "$lock_file" | cut -c1-12)"
base="${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}"
venv="$base/sweeps-$key"
marker="$venv/.lachesis-complete"

if [[ -f "$marker" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

mkdir -p "$base"
exec 9>"$base/sweeps-$key.lock"
if ! flock -w 1800 9; then
  echo "sweeps.sh: timed out waiting for another sweeps.sh building $venv" >&2
  exit 1
fi
if [[ -f "$marker" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

base_python="${LACHESIS_TEST_BASE_PYTHON:-python3}"
if ! command -v "$base_python" >/dev/null; then
  echo "sweeps.sh: $base_python not found" >&2
  exit 1
fi
# No marker means a previous build died half-way: start clean.
rm -rf "$venv"
echo "sweeps.sh: creating $venv (first run downloads ~150 MB from PyPI)" >&2
"$base_python" -m venv "$venv" >&2
if ! "$venv/bin/python" -m pip install --no-deps --no-input --disable-pip-version-check \
  --progress-bar off -q -r "$lock_file" >&2; then
  echo "sweeps.sh: pip install -r $lock_file failed (is PyPI reachable?); leaving $venv incomplete" >&2
  exit 1
fi
if ! "$venv/bin/python" -m pip check >&2; then
  echo "sweeps.sh: the lock is missing or mis-pins a dependency (pip check failed)" >&2
  exit 1
fi
"$venv/bin/python" -W ignore -c 'import sweeps.hyperband_stopping, sweeps.grid_search' >&2

# Written last, atomically: its presence means everything above succeeded.
touch "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$venv/bin/python"
