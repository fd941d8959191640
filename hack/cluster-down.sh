#!/usr/bin/env bash
# Stops every process the local control plane started, from the PID files in .dev/, then fails
# if a control-plane process is still running (hack/check-leftovers.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
dev=.dev
bin=$(pwd -P)/$dev/bin/
cache=$(readlink -m "${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout")/

# ours reports whether pid runs a binary the local control plane starts: .dev/bin/localcluster,
# or a tool from the cache that .dev/bin links to. A PID file outlives a crash or a reboot, and
# its PID may since belong to an unrelated process.
ours() { # pid name
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)} # rebuilt or removed while it runs
  case "$exe" in "$bin"* | "$cache"*) return 0 ;; esac
  [ "$exe" = "$(readlink -f "$dev/bin/$2")" ]
}

stop() { # pidfile
  local f=$1 pid name
  pid=$(cat "$f" 2>/dev/null) || return 0
  name=$(basename "$f" .pid)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    : # already gone
  elif ! ours "$pid" "$name"; then
    echo "$f: pid $pid is no longer $name; removing the stale PID file without killing it" >&2
  else
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name (pid $pid) ignored SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$f"
}

# The gate controller first, while the apiserver still answers; then the supervisor: it stops its
# children in order; then anything it left behind.
[ -f "$dev/gate-controller.pid" ] && stop "$dev/gate-controller.pid"
[ -f "$dev/localcluster.pid" ] && stop "$dev/localcluster.pid"
for f in "$dev"/*.pid; do
  [ -e "$f" ] && stop "$f"
done
# Argo Rollouts' plugin processes, started from the copies in its plugin-bin: the controller
# stops them, but one whose controller was killed outlives it.
plugins=$(pwd -P)/$dev/argo/plugin-bin/
for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "${exe% (deleted)}" in "$plugins"*) kill -KILL "${p#/proc/}" 2>/dev/null ;; esac
done
rm -f "$dev/env"
# A real node whose supervisor was killed left the machine changed: its record says how to undo it.
if [ -x "$dev/bin/localcluster" ]; then
  "$dev/bin/localcluster" -undo-real-node || exit 1
fi
echo "local control plane stopped"
hack/check-leftovers.sh
