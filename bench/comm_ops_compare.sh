#!/usr/bin/env bash
# The Communicator's reduce_scatter, flat allgather and send/recv (and the all-reduce, for
# reference) against the raw library on both backends: bench/comm_compare.sh once per op, each an
# A B A B comparison in one process per rank (dtrain vs raw MPI; dtrain vs raw c10d Gloo, and for
# reduce_scatter also vs Gloo's halving-doubling run inline: the gloo:reduce_scatter/hd rows; see
# bench/gloo_compare.cpp), then one table of every op, backend and size with the ratio dtrain / raw
# and whether it is within TARGET (default 1.1). Builds nothing: build mpi_compare and gloo_compare first.
# usage: bench/comm_ops_compare.sh [BUILD_DIR] [extra flags, e.g. --iters 50 --rounds 4]
#   OPS="reduce_scatter allgather sendrecv allreduce"  SIZES=4K,1M,16M  NP=2  TARGET=1.1
set -euo pipefail
build=${1:-build}
shift || true
here=$(cd "$(dirname "$0")" && pwd)
ops=${OPS:-reduce_scatter allgather sendrecv allreduce}
target=${TARGET:-1.1}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
for op in $ops; do
  echo "== $op" >&2
  "$here/comm_compare.sh" "$build" --op "$op" "$@" | tee /dev/stderr |
    awk '$1 ~ /^(mpi|gloo):/ && $3 ~ /^plain_us=/' >>"$summary"
done
echo
echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "load $(cut -d' ' -f1-3 /proc/loadavg) np ${NP:-2} flags: $*"
printf '%-24s %6s %10s %10s %8s  %-7s %s\n' backend:op size raw_us dtrain_us ratio target per_round
sed 's/[a-z_]*=//g' "$summary" | awk -v t="$target" '{
  verdict = ($5 + 0 <= t + 0) ? "met" : "NOT met"
  printf "%-24s %6s %10s %10s %8s  %-7s %s\n", $1, $2, $3, $4, $5, verdict, $6 }'
