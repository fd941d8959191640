#!/usr/bin/env bash
# Fails if a control-plane process built by hack/tools is still running after the tests,
# ignoring a cluster started on purpose with `make cluster-up` (its PIDs are in .dev/*.pid).
set -uo pipefail
cd "$(dirname "$0")/.."
cache="${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout/tools/"

keep=" "
for f in .dev/*.pid; do [ -e "$f" ] && keep="$keep$(cat "$f") "; done

left=""
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case "$exe" in
    "$cache"*) case "$keep" in *" $pid "*) ;; *) left="$left $pid:$(basename "$exe")" ;; esac ;;
  esac
done
if [ -n "$left" ]; then
  echo "processes left running after the tests:$left" >&2
  exit 1
fi
echo "no control-plane process left running"
