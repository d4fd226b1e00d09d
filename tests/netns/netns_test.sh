#!/usr/bin/env bash
# Several hosts on one machine (bench/netns.sh), end to end. Modes:
#   gloo     2 hosts x 2 ranks, `dtrain launch --nnodes 2 --node-rank i` in each host's namespace
#   mpi      2 hosts x 2 ranks, `dtrain launch --backend mpi` (mpirun) in host 0, which starts host 1's
#            ranks through netns.sh's launch agent (`ip netns exec`, in place of ssh)
#   cleanup  an instance interrupted by SIGTERM, and one whose host fails, leave nothing behind
#   kill     2 hosts x 2 ranks training (gloo, then mpi); every process of host 1's namespace gets
#            SIGKILL after the first checkpoint; every process of host 0 must be gone within 10 s
#            and host 0's job must name a rank of host 1, its address or its name
#   elastic  3 hosts x 2 ranks, `dtrain launch --nnodes 2:3` (Note [Elastic workers]), no checkpoint
#            before the end: every process of host 2 gets SIGKILL mid-run; hosts 0 and 1 must go on
#            at 4 ranks within 10 s from the step they had reached (the state from a peer, not from
#            disk), admit host 2 when it is started again and end at 6 ranks; the final weights must
#            equal those of one host that trains the same steps at the same sizes through --resume
#   soak     3 hosts x 1 rank, `--nnodes 2:3`: 20 random workers killed in turn (bench/elastic_kill.sh);
#            every one replaced, the run finished, at most the step in flight lost per kill
# gloo and mpi train the quickstart config briefly (mlp, 20 steps, 1 Gbit/s links) and require the
# final weights (model.pt) to equal, byte for byte, those of one host running 4 ranks of the same
# backend: rank r gets the same data shard and the all-reduce the same reduction order wherever it
# runs, and every worker has one intra-op thread. They also require that at least one gradient's
# worth per step crossed the link in each direction, so the hosts really were apart.
# Exits 77 (CTest's SKIP_RETURN_CODE) with the reason where namespaces cannot be made.
#   tests/netns/netns_test.sh gloo|mpi|cleanup|kill|elastic|soak DTRAIN SOURCE_DIR
set -euo pipefail
MODE=${1:?mode: gloo, mpi, cleanup, kill, elastic or soak}
DTRAIN=$(readlink -f "${2:?path of the dtrain binary}")
cd "${3:?the source directory}"
NETNS=$PWD/bench/netns.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=20
OVERRIDES=(model.name=mlp "train.max_steps=$STEPS" data.subset_size=2560 data.test_subset_size=500
  train.checkpoint_every_epochs=0 train.log_every_steps=10)

work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-netns-test-XXXXXX")
kill_instance=""  # an instance of the kill mode, removed on every way out
trap '[ -z "$kill_instance" ] || "$NETNS" down "$kill_instance" 2>/dev/null; rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "SKIPPED: $*" >&2
  exit 77
}

# The instance id a netns.sh run printed, and a check that none of it is left.
instance_of() { sed -n 's/^netns.sh: \(dtrain-[0-9]*\): .*/\1/p' "$1" | head -n 1 | grep .; }
check_removed() {  # id
  local left
  [[ $1 =~ ^dtrain-[0-9]+$ ]] || fail "not an instance id: '$1'"
  left=$(ip netns list | awk '{print $1}' | grep "^$1-" || true)
  [ -z "$left" ] || fail "$1: namespaces left behind: $left"
  ! compgen -G "/etc/netns/$1-*" >/dev/null || fail "$1: /etc/netns/$1-* left behind"
  [ ! -e "/run/dtrain-netns/$1" ] || fail "$1: /run/dtrain-netns/$1 left behind"
  echo "$1: nothing left (no namespace, veth, bridge, /etc/netns or state)"
}

# Namespaces and a tbf rate limit can be made, or the test is skipped (not failed).
RATE=(--rate 1gbit)
probe() {
  local id
  [ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (ip netns add)"
  command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
  if ! id=$("$NETNS" up 1 2>"$work/probe.err"); then
    skip "network namespaces cannot be made here: $(grep -v '^netns.sh: dtrain' "$work/probe.err" | head -n 3)"
  fi
  "$NETNS" down "$id" 2>/dev/null
  if ! id=$("$NETNS" up 1 --rate 1gbit 2>"$work/probe.err"); then
    echo "NOTE: tc tbf is unavailable here ($(tail -n 1 "$work/probe.err")); the hosts' links are unlimited" >&2
    RATE=()
  else
    "$NETNS" down "$id" 2>/dev/null
  fi
}

train_reference() {  # backend dir: one host, four ranks, in this namespace over loopback
  local backend=$1 dir=$2
  "$DTRAIN" launch --backend "$backend" --nproc-per-node 4 --threads 1 --log-dir "$dir.logs" -- \
    "$DTRAIN" train configs/quickstart.yaml "${OVERRIDES[@]}" "parallel.backend=$backend" --run-dir "$dir" \
    >"$dir.out" 2>"$dir.err" || { tail -n 30 "$dir.err"; fail "the one-host $backend run failed"; }
}

# What each host runs (netns.sh run sets HOST_INDEX, MASTER_ADDR, DTRAIN_NETNS_HOSTFILE). Host 0
# reports what crossed its link: its eth0's byte counters after the job.
write_host_job() {
  cat >"$work/host_job.sh" <<'EOF'
#!/bin/sh
# host_job.sh BACKEND DTRAIN RUN_DIR OVERRIDES...
set -e
backend=$1 dtrain=$2 run_dir=$3
shift 3
if [ "$backend" = gloo ]; then
  "$dtrain" launch --nnodes 2 --node-rank "$HOST_INDEX" --nproc-per-node 2 --threads 1 \
    --master-addr "$MASTER_ADDR" --master-port 29500 --timeout 120 --log-dir "$run_dir.logs-h$HOST_INDEX" -- \
    "$dtrain" train configs/quickstart.yaml "$@" parallel.backend=gloo --run-dir "$run_dir"
elif [ "$HOST_INDEX" = 0 ]; then
  # Two slots on each host, filled in order: ranks 0, 1 here and 2, 3 on host 1.
  OMPI_MCA_orte_default_dash_host=$(sed 's/$/:2/' "$DTRAIN_NETNS_HOSTFILE" | paste -sd,) \
    "$dtrain" launch --backend mpi --nproc-per-node 4 --threads 1 --log-dir "$run_dir.logs" -- \
    "$dtrain" train configs/quickstart.yaml "$@" parallel.backend=mpi --run-dir "$run_dir"
fi
if [ "$HOST_INDEX" = 0 ]; then
  echo "link-bytes $(hostname) tx $(cat /sys/class/net/eth0/statistics/tx_bytes) rx $(cat /sys/class/net/eth0/statistics/rx_bytes)"
fi
EOF
  chmod +x "$work/host_job.sh"
}

test_training() {  # backend
  local backend=$1 id params tx rx
  if ! "$DTRAIN" info | grep -q "^backends .*\b$backend\b"; then
    skip "this dtrain was built without the $backend backend ($("$DTRAIN" info | grep '^backends'))"
  fi
  if ! compgen -G "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte*" >/dev/null; then
    skip "Fashion-MNIST is not installed (the quickstart's data set); install dataset-fashion-mnist"
  fi
  train_reference "$backend" "$work/one-host"
  echo "one host, 4 ranks ($backend): $(md5sum <"$work/one-host/model.pt" | cut -c1-32)"

  write_host_job
  "$NETNS" run 2 "${RATE[@]}" --timeout 300 --log-dir "$work/hosts" -- \
    "$work/host_job.sh" "$backend" "$DTRAIN" "$work/two-hosts" "${OVERRIDES[@]}" 2>"$work/netns.err" ||
    {
      tail -n 20 "$work/netns.err" "$work"/hosts/h*.log
      fail "the two-host $backend run failed"
    }
  cat "$work/netns.err"
  id=$(instance_of "$work/netns.err")
  check_removed "$id"
  echo "two hosts x 2 ranks ($backend): $(md5sum <"$work/two-hosts/model.pt" | cut -c1-32)"

  # The hosts were apart: each direction of host 0's link carried at least one full gradient per step.
  params=$(grep -o '"parameters": *[0-9]*' "$work/two-hosts/results.json" | grep -o '[0-9]*$')
  [ "${params:-0}" -gt 0 ] || fail "no parameter count in $work/two-hosts/results.json"
  read -r tx rx < <(awk '/^link-bytes/ {print $4, $6}' "$work/hosts/h0.log")
  echo "host 0's link: sent $tx bytes, received $rx bytes; a gradient is $((params * 4)) bytes, $STEPS steps"
  if [ "$tx" -lt $((params * 4 * STEPS)) ] || [ "$rx" -lt $((params * 4 * STEPS)) ]; then
    fail "less than a gradient per step crossed between the hosts: did ranks 2 and 3 run on host 1?"
  fi

  if ! cmp -s "$work/one-host/model.pt" "$work/two-hosts/model.pt"; then
    /usr/bin/python3 - "$work/one-host/model.pt" "$work/two-hosts/model.pt" <<'EOF' || true
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:])
for k in a:
    print(f"{k}: max |difference| {(a[k].double() - b[k].double()).abs().max().item():.3g}")
EOF
    fail "two hosts x 2 ranks ($backend) ended with other weights than one host x 4 ranks"
  fi
  echo "PASS: two hosts x 2 ranks over $backend end with the weights of one host x 4 ranks, bit for bit"
}

test_cleanup() {
  local pid id
  # Interrupted: SIGTERM to netns.sh while its hosts run.
  "$NETNS" run 2 --timeout 60 -- sleep 30 2>"$work/interrupted.err" &
  pid=$!
  for _ in $(seq 100); do
    grep -q 'host dtrain-[0-9]*-h1' "$work/interrupted.err" 2>/dev/null && break
    sleep 0.1
  done
  id=$(instance_of "$work/interrupted.err") || fail "netns.sh run did not start"
  ip netns list | grep -q "^$id-h1" || fail "$id-h1 was not created"
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  [ "$status" -ne 0 ] || fail "an interrupted netns.sh run exited 0"
  echo "interrupted run exited with status $status"
  check_removed "$id"

  # Failed: host 1 fails while host 0 would wait for it; the failure stops host 0 at once.
  status=0
  SECONDS=0
  # shellcheck disable=SC2016  # for the hosts' shell
  "$NETNS" run 2 --timeout 60 -- sh -c '[ "$HOST_INDEX" = 0 ] && exec sleep 30; exit 3' \
    2>"$work/failed.err" || status=$?
  [ "$status" -eq 3 ] || fail "a run whose host exits 3 exited with $status"
  [ "$SECONDS" -lt 20 ] || fail "host 0 was not stopped when host 1 failed (${SECONDS} s)"
  check_removed "$(instance_of "$work/failed.err")"
  echo "PASS: interrupted and failed runs leave nothing behind"
}

# Every process of a host namespace, one line; empty when there is none.
pids_in() { ip netns pids "$1" 2>/dev/null | sort -n | paste -sd' '; }

now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f\n", b - a }'; }

test_kill_host() {  # backend
  local backend=$1 id h0 h1 i job0 job1="" start pids elapsed status=0
  if ! "$DTRAIN" info | grep -q "^backends .*\b$backend\b"; then
    echo "SKIPPED ($backend): this dtrain was built without the $backend backend"
    return
  fi
  # A synthetic data set and many steps: host 1 is killed long before the job could end.
  cat >"$work/kill.yaml" <<END
name: kill
out_dir: $work/runs
data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 512, batch_size: 16,
       test_subset_size: 64}
model: {name: mlp, hidden: [16]}
optim: {name: sgd, lr: 0.05, momentum: 0.9}
parallel: {strategy: data_parallel, timeout_s: 60}
train: {epochs: 100000, log_every_steps: 10, checkpoint_every_steps: 10, checkpoint_every_epochs: 0, seed: 1}
END
  id=$("$NETNS" up 2 2>"$work/kill-up.err") || {
    cat "$work/kill-up.err"
    fail "netns.sh up failed"
  }
  kill_instance=$id
  h0=$id-h0 h1=$id-h1
  rm -rf "$work/kill-run" "$work"/kill-h*.err
  if [ "$backend" = gloo ]; then
    for i in 0 1; do
      HOST_INDEX=$i "$NETNS" exec "$id-h$i" "$DTRAIN" launch --nnodes 2 --node-rank "$i" --nproc-per-node 2 \
        --threads 1 --master-addr 10.213.0.1 --master-port 29500 --timeout 60 --log-dir "$work/kill-logs-h$i" -- \
        "$DTRAIN" train "$work/kill.yaml" parallel.backend=gloo --run-dir "$work/kill-run" \
        >/dev/null 2>"$work/kill-h$i.err" &
      if [ "$i" = 0 ]; then job0=$!; else job1=$!; fi
    done
  else
    # mpirun on host 0 starts host 1's ranks (2 and 3) through netns.sh's launch agent.
    # shellcheck disable=SC2016  # for the host's shell
    "$NETNS" exec "$h0" sh -c 'OMPI_MCA_orte_default_dash_host=$(sed "s/\$/:2/" "$DTRAIN_NETNS_HOSTFILE" | paste -sd,) exec "$@"' \
      sh "$DTRAIN" launch --backend mpi --nproc-per-node 4 --threads 1 --log-dir "$work/kill-logs-h0" -- \
      "$DTRAIN" train "$work/kill.yaml" parallel.backend=mpi --run-dir "$work/kill-run" \
      >/dev/null 2>"$work/kill-h0.err" &
    job0=$!
  fi
  for _ in $(seq 1200); do
    grep -q 'checkpoint .*checkpoint-[0-9]*\.ckpt' "$work/kill-h0.err" 2>/dev/null && break
    kill -0 "$job0" 2>/dev/null || break
    sleep 0.1
  done
  grep -q 'checkpoint .*checkpoint-[0-9]*\.ckpt' "$work/kill-h0.err" || {
    tail -n 20 "$work"/kill-h*.err
    fail "$backend: no checkpoint from the two-host job"
  }
  pids=$(pids_in "$h1")
  [ -n "$pids" ] || fail "$backend: no process in host 1's namespace"
  start=$(now)
  # shellcheck disable=SC2086  # one pid a word
  kill -KILL $pids
  wait "$job0" || status=$?
  [ -z "$job1" ] || wait "$job1" 2>/dev/null || true
  while [ -n "$(pids_in "$h0")" ] && awk -v t="$(seconds_since "$start")" 'BEGIN { exit !(t < 30) }'; do
    sleep 0.01
  done
  elapsed=$(seconds_since "$start")
  echo "$backend, 2 namespaces: kill -9 of every process of host 1 ($pids) -> last process of host 0 gone" \
    "after $elapsed s (host 0's job exited with $status)"
  echo "host 0's job said:"
  grep -E "error|fail|killed|lost|rank [23]\b|10\.213\.0\.2\b|$h1" "$work/kill-h0.err" | head -n 10 | cut -c1-300
  [ -z "$(pids_in "$h0")" ] || fail "$backend: host 0 still runs $(pids_in "$h0") 30 s after host 1 was killed"
  [ "$status" -ne 0 ] || fail "$backend: host 0's job exited 0 after host 1 was killed"
  awk -v t="$elapsed" 'BEGIN { exit !(t < 10) }' || fail "$backend: host 0 took $elapsed s to stop (10 s allowed)"
  grep -Eq "rank [23]\b|10\.213\.0\.2\b|$h1" "$work/kill-h0.err" ||
    fail "$backend: host 0's job did not name a rank of host 1 (2 or 3), its address or its name"
  "$NETNS" down "$id" 2>/dev/null
  kill_instance=""
  check_removed "$id"
  echo "PASS ($backend): killing host 1 stopped host 0 within $elapsed s, naming host 1"
}

source "$(dirname "$0")/elastic_test.sh"

probe
case $MODE in
  gloo | mpi) test_training "$MODE" ;;
  cleanup) test_cleanup ;;
  kill)
    test_kill_host gloo
    test_kill_host mpi
    ;;
  elastic)
    test_elastic_zero
    test_elastic
    ;;
  soak) test_elastic_soak ;;
  *) fail "unknown mode '$MODE'; expected gloo, mpi, cleanup, kill, elastic or soak" ;;
esac
