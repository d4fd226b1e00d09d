#!/bin/sh
# usage: monitored_wire_bytes.sh MPIEXEC NP PROBE
# Runs mpi_wire_bytes_probe twice under OpenMPI's pml monitoring (see the probe's opening comment)
# and checks, for every rank, that the bytes it sent in the second run beyond the first equal the
# wire bytes it recorded. Monitoring writes one line per peer, "I|E <rank> <peer> <N> bytes ...".
set -eu
mpiexec=$1 np=$2 probe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for ops in 0 1; do
  "$mpiexec" -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    --mca btl_vader_single_copy_mechanism none --mca pml_monitoring_enable 1 \
    --mca pml_monitoring_enable_output 3 --mca pml_monitoring_filename "$dir/run$ops" \
    "$probe" "$ops" > "$dir/out$ops"
done
cat "$dir/out1"
status=0
rank=0
while [ "$rank" -lt "$np" ]; do
  sent() { awk '$1 == "E" || $1 == "I" { total += $4 } END { print total + 0 }' "$dir/run$1.$rank.prof"; }
  counted=$(( $(sent 1) - $(sent 0) ))
  recorded=$(awk -v r="$rank" '$1 == "rank" && $2 == r { print $4 }' "$dir/out1")
  echo "rank $rank: recorded $recorded, OpenMPI counted $counted"
  [ "$recorded" = "$counted" ] || status=1
  rank=$((rank + 1))
done
exit $status
