#!/usr/bin/env bash
# Runs the bundled demo workflow end to end on the embedded SQLite store: builds lachesis,
# starts a daemon for the run, queues the demo, follows it to the end, prints its logs.
# LACHESIS_BIN=lachesis runs an installed one instead (the wheel's), and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${LACHESIS_BIN:-}" ]; then
  bin=$LACHESIS_BIN
else
  cargo build --release --quiet
  bin=target/release/lachesis
fi
export LACHESIS_HOME="${LACHESIS_HOME:-$HOME/.lachesis}"
mkdir -p "$LACHESIS_HOME"
# The home's daemon if one runs; else one of our own, detached (its log in daemon.log), stopped
# when the demo ends.
if ! "$bin" daemon status >/dev/null 2>&1; then
  "$bin" daemon --detach >/dev/null
  trap '"$bin" daemon stop >/dev/null || true' EXIT
fi
id=$("$bin" run start --workflow demo)
echo "queued run $id; following it:"
"$bin" run status "$id" --watch
echo
echo "logs of run $id:"
"$bin" run logs "$id"
