#!/usr/bin/env bash
# The whole test suite: unit tests, the integration binary with its PostgreSQL tier, the
# real-Atropos tier (a cached Python venv with atroposlib pinned, created on first use), the
# verifiers tier (another, with verifiers pinned) and the wheel tier (tests/wheel/wheel.sh).
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
# Each PostgreSQL test makes a scratch database; drop the ones earlier runs left (one still
# in use by a concurrent run refuses, and stays).
if command -v psql >/dev/null; then
  psql -h 127.0.0.1 -U root -d postgres -Atc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'lachesis\_test\_%' OR datname LIKE 'lachesis\_bench\_%'" 2>/dev/null |
    while read -r db; do
      psql -h 127.0.0.1 -U root -d postgres -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 || true
    done
fi

# The real-Atropos tier: atroposlib 0.4.0 and the rest of tests/python/requirements.lock.
say "preparing the Python test venv (first time: 1-2 minutes)"
LACHESIS_TEST_PYTHON="$(bash tests/python/venv.sh)"
LACHESIS_TOKENIZER_DIR="$(bash tests/python/venv.sh --tokenizer)"
export LACHESIS_TEST_PYTHON LACHESIS_TOKENIZER_DIR LACHESIS_REQUIRE_ATROPOS=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled

# The checkpoints tier's real tinker-cookbook (its checkpoint code, without torch), beside the
# venv. Once it installs, its test is required; otherwise it says it skips.
if LACHESIS_TEST_COOKBOOK="$(bash tests/python/cookbook.sh)"; then
  export LACHESIS_TEST_COOKBOOK LACHESIS_REQUIRE_COOKBOOK=1
else
  say "tinker-cookbook did not install: its checkpoints test will say it skips"
fi

# The verifiers tier: the real `vf-eval` of verifiers 0.1.9.post3 (what tinker-cookbook 0.6.1's
# `verifiers` extra requires) in a venv of its own. Once it installs, its tests are required.
if LACHESIS_TEST_VERIFIERS_PYTHON="$(bash tests/python/verifiers.sh)"; then
  export LACHESIS_TEST_VERIFIERS_PYTHON LACHESIS_REQUIRE_VERIFIERS=1
else
  say "verifiers did not install: the inference tests of verifiers environments will say they skip"
fi

# The sweeps tier: W&B's own `sweeps` package (its hyperband rule and grid order), in a venv of
# its own since it needs numpy<2. Once it installs, its reference test is required.
if LACHESIS_TEST_SWEEPS_PYTHON="$(bash tests/python/sweeps.sh)"; then
  export LACHESIS_TEST_SWEEPS_PYTHON LACHESIS_REQUIRE_SWEEPS=1
else
  say "W&B's sweeps package did not install: its reference test will say it skips"
fi

# The Slurm launcher's tier: a one-node cluster from Debian's packages (installed when missing
# and we are root). Once it is up, its tests are required; otherwise they say they skip.
say "bringing up a local Slurm cluster"
if slurm_conf="$(bash tests/slurm/cluster.sh | tail -n1)" && [ "${slurm_conf#SLURM_CONF=}" != "$slurm_conf" ]; then
  export LACHESIS_REQUIRE_SLURM=1
else
  say "no Slurm cluster (${slurm_conf:-cluster.sh failed}): the Slurm tests will say they skip"
fi

# The dashboard's browser tier: Debian's headless Chromium (installed when missing and we are
# root). Once it is there, its tests are required; otherwise they say they skip.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Chromium"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null || true
fi
if command -v chromium >/dev/null; then
  export LACHESIS_REQUIRE_CHROMIUM=1
else
  say "no Chromium: the dashboard's browser tests will say they skip"
fi

say "cargo test"
status=0
cargo test --locked --no-fail-fast "$@" || status=$?

# The wheel tier: the wheel built with maturin (pinned, from PyPI), installed into a fresh venv,
# the demo run through it with no Rust toolchain on the PATH (tests/wheel/wheel.sh). After
# `cargo test`, whose compiled dependencies its build reuses.
say "the wheel tier"
bash tests/wheel/wheel.sh || status=1
exit "$status"
