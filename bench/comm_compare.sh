#!/usr/bin/env bash
# Runs both side-by-side comparisons (dtrain's mpi backend vs raw MPI, dtrain's gloo backend vs
# raw c10d Gloo / Gloo), 2 ranks on this host (NP=3 for more), A B A B, for one operation (--op
# allreduce | reduce_scatter | allgather | sendrecv, default allreduce), and prints the ratio table.
# Builds nothing: build the targets mpi_compare and gloo_compare first (cmake --build BUILD
# --target mpi_compare gloo_compare). bench/comm_ops_compare.sh runs it for every op.
# usage: bench/comm_compare.sh [BUILD_DIR] [extra flags, e.g. --op sendrecv --iters 50 --rounds 4]
set -euo pipefail
build=${1:-build}
shift || true
bin="$build/bench"
for prog in mpi_compare gloo_compare; do
  if [ ! -x "$bin/$prog" ]; then
    echo "comm_compare: $bin/$prog not found; build it: cmake --build $build --target $prog" >&2
    exit 2
  fi
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sizes=${SIZES:-4K,1M,16M}
np=${NP:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "+ mpirun -np $np $bin/mpi_compare --sizes $sizes $*" >&2
mpirun -np "$np" --oversubscribe --bind-to none "$bin/mpi_compare" --sizes "$sizes" "$@" | tee -a "$out"

# A free port pair for the two stores (dtrain at P, plain c10d at P+1).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "+ RANK=0..$((np - 1)) WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $bin/gloo_compare --sizes $sizes $*" >&2
pids=()
for rank in $(seq $((np - 1)) -1 0); do
  RANK=$rank WORLD_SIZE=$np LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin/gloo_compare" --sizes "$sizes" "$@" >>"$out.$rank" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat "$out.0" | tee -a "$out"
rm -f "$out".[0-9]*
[ "$status" -eq 0 ] || { echo "comm_compare: gloo_compare failed" >&2; exit 1; }

echo
printf '%-24s %6s %10s %10s %8s  %s\n' backend:op size plain_us dtrain_us ratio per_round
grep -v '^#' "$out" | sed 's/[a-z_]*=//g' | awk '{printf "%-24s %6s %10s %10s %8s  %s\n", $1, $2, $3, $4, $5, $6}'
