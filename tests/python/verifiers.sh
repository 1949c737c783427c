#!/usr/bin/env bash
# Create (once) and locate the Python venv of the verifiers tier: the real `vf-eval` from
# verifiers 0.1.9.post3 (tinker-cookbook 0.6.1's `verifiers` extra requires >=0.1.9,<0.1.10).
#
#   bash tests/python/verifiers.sh         -> prints the venv's python interpreter
#   bash tests/python/verifiers.sh --dir   -> prints the venv directory
#
# Only the path goes to stdout; progress goes to stderr. The venv lives at
# ${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis}/verifiers-venv/<12 hex of sha256(verifiers.lock)>,
# so a changed lock gives a fresh venv and an unchanged one is reused at once. It is apart from
# the Atropos venv: verifiers pins versions of openai and datasets of its own.
# LACHESIS_TEST_BASE_PYTHON picks the base interpreter (default python3, must be >= 3.11).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="$here/verifiers.lock"
what="${1:-python}"
case "$what" in
  python | --python | --dir) ;;
  *) echo "usage: verifiers.sh [--dir]" >&2; exit 2 ;;
esac

key="$(sha256sum "$lock_file" | cut -c1-12)"
base="${LACHESIS_TEST_VENV_DIR:-$HOME/.cache/lachesis}/verifiers-venv"
venv="$base/$key"
marker="$venv/.lachesis-complete"

answer() {
  case "$what" in
    --dir) echo "$venv" ;;
    *) echo "$venv/bin/python" ;;
  esac
}

if [[ -f "$marker" ]]; then
  answer
  exit 0
fi

mkdir -p "$base"
exec 9>"$base/$key.lock"
if ! flock -w 1800 9; then
  echo "verifiers.sh: timed out waiting for another verifiers.sh building $venv" >&2
  exit 1
fi
if [[ -f "$marker" ]]; then
  answer
  exit 0
fi

base_python="${LACHESIS_TEST_BASE_PYTHON:-python3}"
if ! command -v "$base_python" >/dev/null; then
  echo "verifiers.sh: $base_python not found; Python >= 3.11 is required" >&2
  exit 1
fi
if ! "$base_python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "verifiers.sh: $base_python is $("$base_python" -V 2>&1); Python >= 3.11 is required" >&2
  exit 1
fi
# No marker means a previous build died half-way: start clean.
rm -rf "$venv"
echo "verifiers.sh: creating $venv (first run downloads ~600 MB from PyPI)" >&2
"$base_python" -m venv "$venv" >&2
# --no-deps: the lock is the complete resolved set, so pip must not resolve anything new.
if ! "$venv/bin/python" -m pip install --no-deps --no-input --disable-pip-version-check \
  --progress-bar off -q -r "$lock_file" >&2; then
  echo "verifiers.sh: pip install -r $lock_file failed (is PyPI reachable?); leaving $venv incomplete" >&2
  exit 1
fi
if ! "$venv/bin/python" -m pip check >&2; then
  echo "verifiers.sh: the lock is missing or mis-pins a dependency (pip check failed)" >&2
  exit 1
fi
"$venv/bin/python" -c 'import verifiers.scripts.eval' >&2

# Written last, atomically: its presence means everything above succeeded.
echo "$key" >"$marker.tmp"
mv "$marker.tmp" "$marker"
answer
