#!/usr/bin/env bash
# Fails if a process the tests or the local control plane start is still running: a binary from
# the hack/tools cache (etcd, kube-apiserver, ...), or the localcluster or kubeletsim command
# (built into .dev/bin by `make cluster-up`, or by go build / go run under that name), or the
# readiness gate controller `make cluster-up` starts from .dev/bin/inplace-rollout, or the
# tekton-controller `make cluster-up TEKTON=1` starts from it (working in .dev/inplace-rollout-tekton;
# Tekton's own controller is a cached tool), or an Argo Rollouts plugin process
# `make cluster-up ARGO=1` started from .dev/argo/plugin-bin.
# A cluster started on purpose with `make cluster-up` is ignored: its PIDs are in .dev/*.pid.
# Only processes working in this clone count (tests run in their package directory, cluster-up
# in the root), so another clone's cluster or test run on the same machine is not reported.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
cache=$(readlink -m "${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout/tools")/

keep=" "
for f in .dev/*.pid; do [ -e "$f" ] && keep="$keep$(cat "$f") "; done

left=""
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  exe=${exe% (deleted)} # a binary rebuilt or removed while it runs
  cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
  case "$cwd/" in "$root"/*) ;; *) continue ;; esac
  case "$exe" in
    "$cache"* | */localcluster | */kubeletsim | "$root/.dev/bin/inplace-rollout" | "$root/.dev/argo/plugin-bin/"*) ;;
    *) continue ;;
  esac
  case "$keep" in *" $pid "*) continue ;; esac
  # A plugin process of a kept Argo Rollouts controller is that controller's.
  ppid=$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null)
  case "$keep" in *" $ppid "*) continue ;; esac
  left="$left $pid:$(basename "$exe")"
done
if [ -n "$left" ]; then
  echo "processes left running:$left" >&2
  exit 1
fi

# The real node (test/integration/realnode) is machine-wide: its processes work in its own
# directory, not in this clone. While a run holds its lock a node is up (a kept cluster, or
# another clone's test); with the lock free, anything it made is a leftover.
state=$(readlink -m "${XDG_CACHE_HOME:-$HOME/.cache}/inplace-rollout/realnode")
if [ ! -e "$state/lock" ] || flock -n "$state/lock" true; then
  real=""
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$(basename "${exe% (deleted)}")" in containerd | containerd-shim-runc-v2 | kubelet) ;; *) continue ;; esac
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q '/realnode'; then
      real="$real ${p#/proc/}:$(basename "${exe% (deleted)}")"
    fi
  done
  [ -n "$real" ] && { echo "real node processes left running:$real" >&2; exit 1; }
  [ -e "$state/record.json" ] && { echo "a real node run left the machine changed ($state/record.json): make cluster-down undoes it" >&2; exit 1; }
  [ -e /sys/class/net/inplacebr0 ] && { echo "the real node's bridge inplacebr0 is left" >&2; exit 1; }
  grep -q '/realnode/' /proc/self/mountinfo && { echo "real node mounts are left: $(grep -o '[^ ]*/realnode/[^ ]*' /proc/self/mountinfo | head -3)" >&2; exit 1; }
fi
echo "no control-plane process left running"
