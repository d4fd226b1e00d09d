#!/usr/bin/env bash
# An elastic job under repeated kills (docs/faults-and-security.md, "Elastic jobs"): 3 network
# namespaces (bench/netns.sh) x 1 rank, `dtrain launch --nnodes 2:3 --max-restarts KILLS`, a random
# worker killed (SIGKILL) KILLS times, each after the previous one's replacement was admitted. For
# each kill: seconds from the kill to the survivors' generation with its state loaded (the line
# membership.jsonl gains just before the first step at the new size), and to the replacement's.
# At the end: the run must have finished at 3 ranks after train.epochs epochs; prints the medians.
#   bench/elastic_kill.sh [KILLS=20] [DTRAIN=build/bin/dtrain]     (root: network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-20}
DTRAIN=$(readlink -f "${2:-build/bin/dtrain}")
NETNS=$PWD/bench/netns.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-elastic-kill-XXXXXX")
id=""
trap '[ -z "$id" ] || "$NETNS" down "$id" 2>/dev/null; rm -rf "$work"' EXIT
now() { date +%s.%N; }
lines() { wc -l 2>/dev/null <"$work/run/membership.jsonl" || echo 0; }
wait_lines() {  # count seconds: until membership.jsonl has count lines; prints the time it took
  local start t
  start=$(now)
  until [ "$(lines)" -ge "$1" ]; do
    t=$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')
    awk -v t="$t" -v l="$2" 'BEGIN { exit !(t > l) }' && { echo "elastic_kill: waited $2 s for generation $1" >&2; exit 1; }
    sleep 0.01
  done
}
cat >"$work/job.yaml" <<END
name: elastic-kill
data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 3072, batch_size: 16,
       test_subset_size: 64}
model: {name: mlp, hidden: [32]}
optim: {name: sgd, lr: 0.02, momentum: 0.9}
parallel: {strategy: data_parallel, backend: gloo, timeout_s: 60}
train: {epochs: ${EPOCHS:-400}, log_every_steps: 100, eval_every_epochs: 0, checkpoint_every_epochs: 0, seed: 3}
END
id=$("$NETNS" up 3 2>"$work/up.err") || { cat "$work/up.err"; exit 1; }
pids=()
for i in 0 1 2; do
  "$NETNS" exec "$id-h$i" "$DTRAIN" launch --nnodes 2:3 --node-rank "$i" --nproc-per-node 1 --threads 1 \
    --master-addr 10.213.0.1 --master-port 29500 --rdzv-last-call 0.5 --timeout 60 --max-restarts "$KILLS" \
    --log-dir "$work/logs-h$i" -- "$DTRAIN" train "$work/job.yaml" --run-dir "$work/run" \
    >/dev/null 2>"$work/h$i.err" &
  pids+=($!)
done
wait_lines 1 120
sleep 2
for k in $(seq "$KILLS"); do
  before=$(lines)
  host=$((RANDOM % 3))
  victim=""
  for p in $(ip netns pids "$id-h$host"); do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$DTRAIN train "; then victim=$p; break; fi
  done
  [ -n "$victim" ] || { echo "elastic_kill: no worker in host $host" >&2; exit 1; }
  start=$(now)
  kill -KILL "$victim"
  wait_lines $((before + 1)) 60
  lost=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
  # The replacement: a generation of 3 again.
  until [ "$(lines)" -gt "$before" ] && tail -n 1 "$work/run/membership.jsonl" | grep -q '"world_size":3'; do
    awk -v a="$start" -v b="$(now)" 'BEGIN { exit !(b - a > 60) }' && { echo "elastic_kill: no replacement" >&2; exit 1; }
    sleep 0.01
  done
  back=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
  echo "{\"kill\": $k, \"host\": $host, \"to_smaller_generation_s\": $lost, \"to_replacement_admitted_s\": $back}"
  sleep 1
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
[ "$status" -eq 0 ] || { tail -n 5 "$work"/h*.err; echo "elastic_kill: a launcher exited with $status" >&2; exit 1; }
grep -q '"status": *"finished"' "$work/run/results.json" || { echo "elastic_kill: the run did not finish" >&2; exit 1; }
steps=$(grep -o '"steps": *[0-9]*' "$work/run/results.json" | head -n 1 | grep -o '[0-9]*$')
expected=$((3072 / 16 / 3 * ${EPOCHS:-400}))
[ "$steps" -eq "$expected" ] || { echo "elastic_kill: the run ended at step $steps, not $expected" >&2; exit 1; }
# Steps trained again: the one in flight at each loss, nothing at an admission (membership.jsonl).
lost=$(grep -o '"steps_lost":[0-9]*' "$work/run/membership.jsonl" | grep -o '[0-9]*$' |
  awk '{ t += $1; if ($1 > m) m = $1 } END { printf "%d, \"most_steps_lost_in_a_generation\": %d", t, m }')
echo "{\"kills\": $KILLS, \"generations\": $(lines), \"steps\": $steps, \"steps_lost\": $lost, \"finished\": true}"
