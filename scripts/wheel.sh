#!/usr/bin/env bash
# Builds the wheel (pyproject.toml): `lachesis` and `lachesis-shim`, release profile, with the
# maturin pinned in tests/wheel/maturin.lock (a venv under ~/.cache/lachesis, made on first use).
# Prints the wheel's path; install it with pip, `uv tool install` or `pipx install`.
#
#   bash scripts/wheel.sh [OUT_DIR [MATURIN_BUILD_ARGS...]]     OUT_DIR defaults to target/wheels
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/wheels}
shift || true
maturin="$(bash tests/wheel/maturin.sh)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Into a scratch directory first, so the path printed is this build's wheel and no older one.
"$maturin" build --release --out "$scratch" "$@" >&2
mkdir -p "$out"
wheel=$(find "$scratch" -maxdepth 1 -name 'lachesis_rl-*.whl' -print -quit)
[ -n "$wheel" ] || { echo "wheel.sh: maturin wrote no wheel" >&2; exit 1; }
mv "$wheel" "$out/"
echo "$out/$(basename "$wheel")"
