#!/usr/bin/env bash
# Stops what up.sh (and the tests) started in DIR; the logs stay in DIR/logs.
set -uo pipefail
dir="${1:?usage: down.sh DIR}"
for pidfile in "$dir"/*.pid; do
  [[ -e "$pidfile" ]] || continue
  pid="$(cat "$pidfile")"
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
done
exit 0
