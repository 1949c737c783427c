#!/usr/bin/env bash
# Create (once) and locate a venv holding maturin, pinned in tests/wheel/maturin.lock. Prints the
# path of its `maturin` executable; progress goes to stderr.
#
# The venv lives at ${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}/maturin-<12 hex of
# sha256(maturin.lock)> (about 20 MB, seconds on first use), reused while the lock is unchanged.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="$here/maturin.lock"
key="$(sha256sum "$lock_file" | cut -c1-12)"
base="${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}"
venv="$base/maturin-$key"
marker="$venv/.lachesis-complete"

if [[ -f "$marker" ]]; then
  echo "$venv/bin/maturin"
  exit 0
fi

mkdir -p "$base"
exec 9>"$base/maturin-$key.lock"
if ! flock -w 600 9; then
  echo "maturin.sh: timed out waiting for another maturin.sh building $venv" >&2
  exit 1
fi
if [[ -f "$marker" ]]; then
  echo "$venv/bin/maturin"
  exit 0
fi

base_python="${LACHESIS_TEST_BASE_PYTHON:-python3}"
command -v "$base_python" >/dev/null || { echo "maturin.sh: $base_python not found" >&2; exit 1; }
# No marker means a previous build died half-way: start clean.
rm -rf "$venv"
echo "maturin.sh: creating $venv" >&2
"$base_python" -m venv "$venv" >&2
if ! "$venv/bin/python" -m pip install --no-deps --only-binary=:all: --no-input \
  --disable-pip-version-check --progress-bar off -q -r "$lock_file" >&2; then
  echo "maturin.sh: pip install -r $lock_file failed (is PyPI reachable?); leaving $venv incomplete" >&2
  exit 1
fi
"$venv/bin/maturin" --version >&2

# Written last, atomically: its presence means everything above succeeded.
touch "$marker.tmp"
mv "$marker.tmp" "$marker"
echo "$venv/bin/maturin"
