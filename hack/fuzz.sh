#!/usr/bin/env bash
# Fuzzes one target for about a given time, in runs bounded by a count of inputs.
#
# Usage: hack/fuzz.sh DURATION PACKAGE TARGET CHUNK
#   DURATION  how long to go on starting runs: 90, 90s, 5m or 1h
#   CHUNK     the inputs of one run (-fuzztime CHUNKx)
#
# A -fuzztime duration is not used: Go 1.26's fuzzer can fail a run at its deadline with no
# failing input when the machine is loaded (golang/go#75804), and a count has no deadline. The
# runs share the fuzz cache ($GOCACHE/fuzz), so each goes on from the corpus of the ones before.
# The last run may end up to one chunk after DURATION. A failing input is written to
# PACKAGE/testdata/fuzz/TARGET by go test, and the script stops there with its status.
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 DURATION PACKAGE TARGET CHUNK" >&2
  exit 2
fi
duration=$1 pkg=$2 target=$3 chunk=$4

case "$duration" in
  *h) secs=$(( ${duration%h} * 3600 )) ;;
  *m) secs=$(( ${duration%m} * 60 )) ;;
  *s) secs=${duration%s} ;;
  *) secs=$duration ;;
esac
if ! [[ "$secs" =~ ^[0-9]+$ && "$chunk" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: DURATION must be a whole number of seconds, minutes (m) or hours (h), CHUNK a count; got $duration and $chunk" >&2
  exit 2
fi

end=$(( SECONDS + secs ))
runs=0
while :; do
  runs=$(( runs + 1 ))
  go test -run '^$' -fuzz "^$target\$" -fuzztime "${chunk}x" "$pkg"
  [ "$SECONDS" -lt "$end" ] || break
done
echo "$target in $pkg: $runs runs of $chunk inputs in ${SECONDS}s"
