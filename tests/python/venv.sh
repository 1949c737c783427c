#!/usr/bin/env bash
# Create (once) and locate the Python venv used by lachesis' real-Atropos tests.
#
#   bash tests/python/venv.sh              -> prints the venv's python interpreter
#   bash tests/python/venv.sh --tokenizer  -> prints the local tokenizer dir (<venv>/lachesis-tokenizer)
#   bash tests/python/venv.sh --dir        -> prints the venv directory
#
# Only the path goes to stdout; progress goes to stderr. The venv lives at
# ${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}/<12 hex of sha256(requirements.lock)>,
# so changing the lock gives a fresh venv and an unchanged lock reuses the cached one instantly.
# LACHESIS_TEST_BASE_PYTHON picks the base interpreter (default python3, must be >= 3.11).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="$here/requirements.lock"
what="${1:-python}"
case "$what" in
  python | --python | --tokenizer | --dir) ;;
  *) echo "usage: venv.sh [--tokenizer | --dir]" >&2; exit 2 ;;
esac

key="$(sha256sum "$lock_file" | cut -c1-12)"
base="${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis/test-venv}"
venv="$base/$key"
marker="$venv/.lachesis-complete"
# The tokenizer is derived from make_tokenizer.py, not from the lock: a changed script rebuilds
# only the tokenizer, inside the same venv.
stamp="tokenizer=$(sha256sum "$here/make_tokenizer.py" | cut -c1-12)"

answer() {
  case "$what" in
    --tokenizer) echo "$venv/lachesis-tokenizer" ;;
    --dir) echo "$venv" ;;
    *) echo "$venv/bin/python" ;;
  esac
}

# Fast path: no lock, no python start-up.
if [[ -f "$marker" && "$(cat "$marker")" == "$stamp" ]]; then
  answer
  exit 0
fi

mkdir -p "$base"
exec 9>"$base/$key.lock"
if ! flock -w 1800 9; then
  echo "venv.sh: timed out waiting for another venv.sh building $venv" >&2
  exit 1
fi

# Someone else may have finished while we waited for the lock.
if [[ -f "$marker" && "$(cat "$marker")" == "$stamp" ]]; then
  answer
  exit 0
fi

if [[ ! -f "$marker" ]]; then
  base_python="${LACHESIS_TEST_BASE_PYTHON:-python3}"
  if ! command -v "$base_python" >/dev/null; then
    echo "venv.sh: $base_python not found; Python >= 3.11 is required" >&2
    exit 1
  fi
  if ! "$base_python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "venv.sh: $base_python is $("$base_python" -V 2>&1); Python >= 3.11 is required" \
      "(set LACHESIS_TEST_BASE_PYTHON to another interpreter)" >&2
    exit 1
  fi
  # No marker means a previous build died half-way: start clean.
  rm -rf "$venv"
  echo "venv.sh: creating $venv (first run downloads ~1 GB from PyPI, takes a few minutes)" >&2
  "$base_python" -m venv "$venv" >&2
  # --no-deps: the lock is the complete resolved set, so pip must not resolve anything new.
  if ! "$venv/bin/python" -m pip install --no-deps --no-input --disable-pip-version-check \
    --progress-bar off -q -r "$lock_file" >&2; then
    echo "venv.sh: pip install -r $lock_file failed (is PyPI reachable?); leaving $venv incomplete" >&2
    exit 1
  fi
  if ! "$venv/bin/python" -m pip check >&2; then
    echo "venv.sh: the lock is missing or mis-pins a dependency (pip check failed)" >&2
    exit 1
  fi
fi

echo "venv.sh: building tokenizer in $venv/lachesis-tokenizer" >&2
"$venv/bin/python" "$here/make_tokenizer.py" "$venv/lachesis-tokenizer"

# Written last, atomically: its presence means everything above succeeded.
echo "$stamp" >"$marker.tmp"
mv "$marker.tmp" "$marker"
answer
