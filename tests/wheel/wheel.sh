#!/usr/bin/env bash
# The wheel tier (tests/run.sh runs it after `cargo test`): builds the wheel as scripts/wheel.sh
# does, checks its manylinux tag against the glibc its executables need, installs it into a fresh
# venv, and runs the demo through it with no Rust toolchain on the PATH: a detached daemon, a
# run to `completed`, `daemon stop`. Exits 0 when all of that holds, 1 saying what did not.
#
# It builds with the `dev` profile and the test build's features (`testing`) by default, so it
# reuses all the test build compiled, lachesis's library included: only the two executables are
# compiled again (stripped), some 15 s instead of the whole crate's 3-6 min beside the tests.
# `testing` adds crash points that only LACHESIS_FAILPOINT arms and fixtures only the tests call;
# the wheel's packaging (its tag, glibc, scripts, install, the demo) is the same without it.
# LACHESIS_WHEEL_PROFILE=release LACHESIS_WHEEL_FEATURES= builds the wheel users get, as
# scripts/wheel.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf 'wheel: %s\n' "$*" >&2; }
fail() {
  printf 'wheel: FAILED: %s\n' "$*" >&2
  exit 1
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/lachesis-wheel.XXXXXX")
home=$scratch/home
venv=$scratch/venv
stop_daemon() {
  # A daemon the demo left running (it failed half-way) is stopped, then the scratch removed.
  # (None running, the usual case, exits 5: not a failure of the tier.)
  if [ -x "$venv/bin/lachesis" ]; then HOME=$home "$venv/bin/lachesis" daemon stop >/dev/null 2>&1 || true; fi
  rm -rf "$scratch"
}
trap stop_daemon EXIT

maturin=$(bash tests/wheel/maturin.sh) || fail "no maturin (tests/wheel/maturin.sh)"
profile=${LACHESIS_WHEEL_PROFILE:-dev}
features=${LACHESIS_WHEEL_FEATURES-testing}
say "building the wheel (maturin build --profile $profile${features:+ --features $features})"
"$maturin" build --profile "$profile" ${features:+--features "$features"} --out "$scratch/dist" >&2 ||
  fail "maturin build failed"
wheel=$(find "$scratch/dist" -maxdepth 1 -name 'lachesis_rl-*.whl' -print -quit)
[ -n "$wheel" ] || fail "maturin wrote no wheel"
say "built $(basename "$wheel")"

# The tag pyproject.toml asks for is the wheel's, and the executables need no newer glibc.
tag=$(sed -n 's/^compatibility = "\(manylinux_2_[0-9]*\)".*/\1/p' pyproject.toml)
[ -n "$tag" ] || fail "pyproject.toml names no manylinux_2_N compatibility"
case "$(basename "$wheel")" in
*"-${tag}_$(uname -m).whl") ;;
*) fail "$(basename "$wheel") is not tagged ${tag}_$(uname -m)" ;;
esac
python3 -m zipfile -e "$wheel" "$scratch/unpacked"
scripts=$(find "$scratch/unpacked" -path '*.data/scripts/*' -type f | sort)
names=$(for s in $scripts; do basename "$s"; done | tr '\n' ' ')
[ "$names" = "lachesis lachesis-shim " ] || fail "the wheel's scripts are '$names', not 'lachesis lachesis-shim'"
# shellcheck disable=SC2086
needed=$(objdump -T $scripts | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -n1)
allowed=${tag#manylinux_2_}
[ "${needed#GLIBC_2.}" -le "$allowed" ] || fail "the executables need $needed, more than $tag allows"
say "the executables need $needed at most; tagged $tag"

say "installing it into a fresh venv"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check -q "$wheel" >&2 ||
  fail "pip install $wheel failed"
[ -x "$venv/bin/lachesis" ] && [ -x "$venv/bin/lachesis-shim" ] || fail "pip did not put both executables in $venv/bin"

# The PATH of a machine without Rust: the venv's bin, then the system's directories that hold
# neither cargo nor rustc.
path=$venv/bin
for dir in /usr/local/bin /usr/bin /bin; do
  [ -e "$dir/cargo" ] || [ -e "$dir/rustc" ] || path=$path:$dir
done
run() { env -i HOME="$home" PATH="$path" LANG=C.UTF-8 "$@"; }
run sh -c '! command -v cargo && ! command -v rustc' >/dev/null || fail "a Rust toolchain is on $path"
mkdir -m 700 "$home"

say "running the demo through the installed lachesis (no Rust on the PATH)"
run LACHESIS_BIN=lachesis bash scripts/demo.sh >"$scratch/demo.out" 2>&1 || {
  cat "$scratch/demo.out" >&2
  fail "the demo did not complete"
}
id=$(sed -n 's/^queued run \([0-9a-f-]*\);.*/\1/p' "$scratch/demo.out")
[ -n "$id" ] || fail "the demo queued no run: $(cat "$scratch/demo.out")"
state=$(run lachesis run status "$id" --json | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["state"])')
[ "$state" = completed ] || fail "run $id is $state, not completed"
# The demo stopped the daemon it started; its log says the stages ran under the wheel's shim.
if run lachesis daemon status >/dev/null 2>&1; then fail "the daemon still runs after the demo's daemon stop"; fi
grep -qF "stages start under $venv/bin/lachesis-shim" "$home/.lachesis/daemon.log" ||
  fail "the daemon did not find lachesis-shim beside it: $(grep -i shim "$home/.lachesis/daemon.log" | tail -n3)"
say "ok: run $id completed through the wheel's lachesis and lachesis-shim; the daemon stopped"
