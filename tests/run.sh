#!/usr/bin/env bash
# The whole test suite: unit tests, the integration binary with its PostgreSQL tier, the
# real-Atropos tier (a cached Python venv with atroposlib pinned, created on first use), the
# verifiers tier (another, with verifiers pinned) and the wheel tier (tests/wheel/wheel.sh).
#
#   bash tests/run.sh [ARGS...]     ARGS go to the test runner: `cargo nextest run` where
#                                   cargo-nextest is installed (e.g. -E 'test(sweeps)'),
#                                   `cargo test` otherwise; the build is always the whole suite's.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== %s\n' "$*" >&2; }

# PostgreSQL at 127.0.0.1:5432 (trust auth), required: the store's suites and the integration
# tests run on it as on SQLite. Started if installed but stopped; installed from Debian's
# packages if missing and we may; otherwise the suite fails here, before building anything.
# (Without pg_isready, e.g. a server elsewhere and no client installed: does the port answer?)
postgres_up() {
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null
  else
    (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
  fi
}
if ! postgres_up; then
  if ! command -v pg_ctlcluster >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing PostgreSQL"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null || true
  fi
  if command -v pg_ctlcluster >/dev/null; then
    say "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 50); do postgres_up && break; sleep 0.2; done
  fi
fi
if ! postgres_up; then
  say "PostgreSQL is not reachable at 127.0.0.1:5432 and could not be started: the suite needs it"
  exit 1
fi
export LACHESIS_REQUIRE_POSTGRES=1
# On a fresh machine most of the time goes to compiling (CPU) and to setting the tiers up
# (downloads, unpacking: the network and the disk), so the two overlap: the test build starts
# now, in the background, and the tiers set up beside it, each in a job of its own. A cold
# target directory builds without incremental data, which a build nobody edits only pays for;
# a warm one keeps cargo's default.
[ -d target/debug ] || export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
jobs_dir=$(mktemp -d "${TMPDIR:-/tmp}/lachesis-run.XXXXXX")
# On the way out (a tier that cannot be had, a failed build) nothing is left running. A job
# that has already ended makes `kill` fail, which under `set -e` would turn the command's own
# status into 1: the trap never fails.
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$jobs_dir" || true' EXIT
say "building the tests (in the background) while the tiers set up"
cargo test --locked --no-run >"$jobs_dir/build.log" 2>&1 &
build=$!
# job NAME COMMAND...: runs COMMAND in the background, its stdout to NAME.out, stderr to NAME.err.
job() {
  local name=$1
  shift
  ("$@" >"$jobs_dir/$name.out" 2>"$jobs_dir/$name.err"; echo $? >"$jobs_dir/$name.rc") &
}
# finish NAME: waits for job NAME, shows what it said on stderr, and exits with its status.
finish() {
  while [ ! -f "$jobs_dir/$1.rc" ]; do sleep 0.2; done
  cat "$jobs_dir/$1.err" >&2
  return "$(cat "$jobs_dir/$1.rc")"
}
# The real-Atropos tier (atroposlib 0.4.0 and the rest of tests/python/requirements.lock), its
# local tokenizer and, beside it, the checkpoints tier's real tinker-cookbook (its checkpoint
# code, without torch): one after the other, since each builds on the venv before it.
atropos() {
  bash tests/python/venv.sh >"$jobs_dir/python" &&
    bash tests/python/venv.sh --tokenizer >"$jobs_dir/tokenizer" &&
    { bash tests/python/cookbook.sh >"$jobs_dir/cookbook" || true; }
}
job atropos atropos
# The verifiers tier: the real `vf-eval` of verifiers 0.1.9.post3 (what tinker-cookbook 0.6.1's
# `verifiers` extra requires) in a venv of its own.
job verifiers bash tests/python/verifiers.sh
# The sweeps tier: W&B's own `sweeps` package (its hyperband rule and grid order), in a venv of
# its own since it needs numpy<2.
job sweeps bash tests/python/sweeps.sh
# The wheel tier's maturin (pinned), ready for after `cargo test`.
job maturin bash tests/wheel/maturin.sh
# The Slurm launcher's tier (a one-node cluster from Debian's packages, installed when missing
# and we are root), then the dashboard's browser tier (Debian's headless Chromium, likewise):
# one after the other, since both may need apt.
system_tiers() {
  bash tests/slurm/cluster.sh | tail -n1 >"$jobs_dir/slurm_conf" || true
  if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing Chromium" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null || true
  fi
}
job system system_tiers
# Each PostgreSQL test makes a scratch database, and the tests leave them: drop the ones earlier
# runs left (one still in use by a concurrent run refuses, and stays). Each DROP DATABASE
# forces a checkpoint of the server (a second or more under load), so it is a job too.
drop_scratch_databases() {
  command -v psql >/dev/null || return 0
  psql -h 127.0.0.1 -U root -d postgres -Atc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'lachesis\_test\_%' OR datname LIKE 'lachesis\_bench\_%'" 2>/dev/null |
    while read -r db; do
      psql -h 127.0.0.1 -U root -d postgres -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 || true
    done
}
job scratch drop_scratch_databases

say "preparing the Python test venv (first time: 1-2 minutes)"
finish atropos || {
  say "the Python test venv could not be made: the suite needs it"
  exit 1
}
LACHESIS_TEST_PYTHON="$(cat "$jobs_dir/python")"
LACHESIS_TOKENIZER_DIR="$(cat "$jobs_dir/tokenizer")"
export LACHESIS_TEST_PYTHON LACHESIS_TOKENIZER_DIR LACHESIS_REQUIRE_ATROPOS=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
# Once tinker-cookbook installs, its test is required; otherwise it says it skips.
if [ -s "$jobs_dir/cookbook" ]; then
  LACHESIS_TEST_COOKBOOK="$(cat "$jobs_dir/cookbook")"
  export LACHESIS_TEST_COOKBOOK LACHESIS_REQUIRE_COOKBOOK=1
else
  say "tinker-cookbook did not install: its checkpoints test will say it skips"
fi
# Once verifiers installs, its tests are required.
if finish verifiers; then
  LACHESIS_TEST_VERIFIERS_PYTHON="$(cat "$jobs_dir/verifiers.out")"
  export LACHESIS_TEST_VERIFIERS_PYTHON LACHESIS_REQUIRE_VERIFIERS=1
else
  say "verifiers did not install: the inference tests of verifiers environments will say they skip"
fi
# Once W&B's sweeps installs, its reference test is required.
if finish sweeps; then
  LACHESIS_TEST_SWEEPS_PYTHON="$(cat "$jobs_dir/sweeps.out")"
  export LACHESIS_TEST_SWEEPS_PYTHON LACHESIS_REQUIRE_SWEEPS=1
else
  say "W&B's sweeps package did not install: its reference test will say it skips"
fi
say "bringing up a local Slurm cluster"
finish system || true
slurm_conf=$(cat "$jobs_dir/slurm_conf" 2>/dev/null || true)
if [ -n "$slurm_conf" ] && [ "${slurm_conf#SLURM_CONF=}" != "$slurm_conf" ]; then
  # The tests use the cluster as brought up here (tests/it/slurm.rs), without probing it again.
  export LACHESIS_REQUIRE_SLURM=1 LACHESIS_SLURM_CONF="${slurm_conf#SLURM_CONF=}"
else
  say "no Slurm cluster (${slurm_conf:-cluster.sh failed}): the Slurm tests will say they skip"
fi
if command -v chromium >/dev/null; then
  export LACHESIS_REQUIRE_CHROMIUM=1
else
  say "no Chromium: the dashboard's browser tests will say they skip"
fi
finish maturin >/dev/null || say "maturin did not install: the wheel tier will say so"

finish scratch || true
say "waiting for the test build"
if ! wait "$build"; then
  cat "$jobs_dir/build.log" >&2
  say "the tests did not build"
  exit 1
fi

status=0
if cargo nextest --version >/dev/null 2>&1; then
  # cargo-nextest (on every machine of this kind): the unit and the integration tests in one
  # pool, each test a process of its own, three per core (most tests wait on daemons, stages and
  # databases, not on the CPU). It is handed the build's list of test binaries and cargo's
  # metadata, so it runs what was just built without calling cargo again, and the wheel tier
  # (a cargo build of its own, which would wait for cargo's lock) runs beside the tests.
  cargo nextest list --locked --list-type binaries-only --message-format json >"$jobs_dir/binaries.json"
  cargo metadata --locked --format-version 1 --no-deps >"$jobs_dir/metadata.json"
  # The wheel's build links stripped executables and would put its `lachesis` where the tests
  # exec theirs (target/debug/lachesis), so it builds in a copy of the test build's compiled
  # crates (their fingerprints hold no absolute target path): with the test build's features,
  # only the two executables compile again there (tests/wheel/wheel.sh).
  say "the wheel tier (beside the tests; its output follows theirs)"
  mkdir -p "$jobs_dir/wheel-target/debug"
  cp -a target/debug/.fingerprint target/debug/build target/debug/deps "$jobs_dir/wheel-target/debug/"
  job wheel env CARGO_TARGET_DIR="$jobs_dir/wheel-target" bash tests/wheel/wheel.sh
  say "the tests (cargo nextest)"
  cargo nextest run --no-fail-fast --test-threads "$(($(nproc) * 3))" \
    --binaries-metadata "$jobs_dir/binaries.json" --cargo-metadata "$jobs_dir/metadata.json" "$@" || status=$?
  finish wheel || status=1
else
  say "cargo test"
  cargo test --locked --no-fail-fast "$@" || status=$?
  # The wheel tier: the wheel built with maturin (pinned, from PyPI), installed into a fresh
  # venv, the demo run through it with no Rust toolchain on the PATH (tests/wheel/wheel.sh).
  say "the wheel tier"
  bash tests/wheel/wheel.sh || status=1
fi
exit "$status"
