#!/usr/bin/env bash
# Runs the bundled demo workflow end to end on the embedded SQLite store: builds lachesis,
# starts a daemon for the run, queues the demo, follows it to the end, prints its logs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lachesis
export LACHESIS_HOME="${LACHESIS_HOME:-$HOME/.lachesis}"
mkdir -p "$LACHESIS_HOME"
"$bin" daemon 2>>"$LACHESIS_HOME/daemon.log" &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true' EXIT
id=$("$bin" run start --workflow demo)
echo "queued run $id; following it:"
"$bin" run status "$id" --watch
echo
echo "logs of run $id:"
"$bin" run logs "$id"
