#!/usr/bin/env bash
# Stops every process the local control plane started, from the PID files in .dev/, then fails
# if a control-plane process is still running (hack/check-leftovers.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
dev=.dev

stop() { # pidfile
  local f=$1 pid
  pid=$(cat "$f" 2>/dev/null) || return 0
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$(basename "$f" .pid) (pid $pid) ignored SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}

# The supervisor first: it stops its children in order; then anything it left behind.
[ -f "$dev/localcluster.pid" ] && stop "$dev/localcluster.pid"
for f in "$dev"/*.pid; do
  [ -e "$f" ] && stop "$f"
done
rm -f "$dev/env"
echo "local control plane stopped"
hack/check-leftovers.sh
