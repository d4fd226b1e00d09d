# netns_test.sh's elastic mode (sourced by it): 3 hosts x 2 ranks, `dtrain launch --nnodes 2:3`.
# shellcheck shell=bash

# The highest step rank 0 has logged in run folder $1 (0 before any).
logged_step() { grep -ho 'step [0-9]*/' "$1"/site_0/log.txt 2>/dev/null | tr -dc '0-9\n' | sort -n | tail -n 1 || true; }
# Until `$@` succeeds, at most $1 seconds; fails the test naming $2 after that.
wait_for() {  # seconds what command...
  local limit=$1 what=$2
  shift 2
  local start
  start=$(now)
  until "$@"; do
    awk -v t="$(seconds_since "$start")" -v l="$limit" 'BEGIN { exit !(t < l) }' || fail "waited $limit s for $what"
    sleep 0.1
  done
}
step_at_least() { local s; s=$(logged_step "$1"); [ "${s:-0}" -ge "$2" ]; }
# Whether rank 0 has logged $3 steps since generation $2 of run folder $1 began.
steps_into_generation() {
  local n
  n=$(awk -v g="elastic generation $2:" 'index($0, g) { on = 1; next } on && /step [0-9]+\// { n++ } END { print n + 0 }' \
    "$1"/site_0/log.txt 2>/dev/null || echo 0)
  [ "$n" -ge "$3" ]
}
generation_logged() { grep -q "elastic generation $2:" "$1"/site_0/log.txt 2>/dev/null; }
# Field $2 of generation $3's line in membership.jsonl of run folder $1.
generation_field() { sed -n "$(($3 + 1))p" "$1/membership.jsonl" | grep -o "\"$2\":[0-9]*" | grep -o '[0-9]*$'; }

last_generation_field() { tail -n 1 "$1/membership.jsonl" | grep -o "\"$2\":[0-9]*" | grep -o '[0-9]*$'; }
replacement_admitted() {
  [ "$(last_generation_field "$1" world_size)" = 6 ] && tail -n 1 "$1/membership.jsonl" | grep -q -- '-1"'
}

# Waits for the launchers' jobs ($2...); fails quoting their stderr files ($1*.err) when one exits non-zero.
wait_launchers() {  # err_prefix jobs...
  local prefix=$1 job status
  shift
  for job in "$@"; do
    status=0
    wait "$job" || status=$?
    [ "$status" -eq 0 ] || {
      tail -n 20 "$prefix"*.err
      fail "a launcher of the elastic job exited with $status"
    }
  done
}

elastic_host() {  # id host log_suffix: host's launcher in the background, its pid in $host_pid
  local id=$1 i=$2 suffix=$3
  "$NETNS" exec "$id-h$i" "$DTRAIN" launch --nnodes 2:3 --node-rank "$i" --nproc-per-node 2 --threads 1 \
    --master-addr 10.213.0.1 --master-port 29500 --rdzv-last-call 1 --timeout 60 --max-restarts 1 \
    --log-dir "$work/el-logs-h$i$suffix" -- "$DTRAIN" train "$work/elastic.yaml" --run-dir "$work/el-run" \
    >/dev/null 2>"$work/el-h$i$suffix.err" &
  host_pid=$!
}

# The same steps at the same sizes on this host, generation by generation of run folder $2's
# membership.jsonl, each a --resume of config $1 into $3; the final weights must equal run $2's.
compare_with_resumed_reference() {  # config run reference
  local config=$1 run=$2 ref=$3 g=0 count size next resume
  resume=(--run-dir "$ref")
  count=$(wc -l <"$run/membership.jsonl")
  while [ "$g" -lt "$count" ]; do
    size=$(generation_field "$run" world_size "$g")
    next=0  # the last generation runs to the end
    # to the step the next generation's state was saved at, as this size counts steps
    [ $((g + 1)) -ge "$count" ] || next=$(generation_field "$run" resumed_from_step $((g + 1)))
    "$DTRAIN" launch --nproc-per-node "$size" --threads 1 --oversubscribe --log-dir "$ref.logs$g" -- \
      "$DTRAIN" train "$config" "train.max_steps=$next" "${resume[@]}" >/dev/null 2>"$ref.err$g" ||
      fail "reference generation $g ($size ranks, to step $next)"
    resume=(--resume "$ref")
    g=$((g + 1))
  done
  if ! cmp -s "$ref/model.pt" "$run/model.pt"; then
    /usr/bin/python3 - "$ref/model.pt" "$run/model.pt" <<'PY' ||
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:])
worst = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
print(f"largest |difference| of a weight: {worst:.3g}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
      fail "$run's weights differ from those of the same steps at the same sizes by more than 1e-5"
  fi
}

# zero over loopback, --nnodes 1:2, 1 rank a node: node 0 alone, then node 1 admitted (the whole
# state gathered and resharded over 2), then node 1's rank killed: its shard is lost, so the job
# continues from the latest checkpoint, with node 1's replacement when it comes in time. The weights
# must equal the resumed reference's.
test_elastic_zero() {
  local job0 job1 c
  cat >"$work/zero.yaml" <<END
name: zero
data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 2048, batch_size: 16,
       test_subset_size: 64}
model: {name: mlp, hidden: [512, 512]}
optim: {name: adam, lr: 0.01}
parallel: {strategy: zero, backend: gloo, timeout_s: 60}
train: {epochs: 40, log_every_steps: 10, checkpoint_every_steps: 25, checkpoint_every_epochs: 0, seed: 5}
END
  rm -rf "$work/z-run"
  zero_node() {  # i
    "$DTRAIN" launch --nnodes 1:2 --node-rank "$1" --nproc-per-node 1 --threads 1 --master-addr 127.0.0.1 \
      --master-port 29541 --rdzv-last-call 0.3 --timeout 60 --max-restarts 1 --log-dir "$work/z-logs-h$1" -- \
      "$DTRAIN" train "$work/zero.yaml" --run-dir "$work/z-run" >/dev/null 2>"$work/z-h$1.err"
  }
  zero_node 0 &
  job0=$!
  wait_for 120 "step 100 of node 0 alone" step_at_least "$work/z-run" 100
  zero_node 1 &
  job1=$!
  wait_for 60 "node 1's admission" generation_logged "$work/z-run" 1
  [ "$(generation_field "$work/z-run" world_size 1)" = 2 ] || fail "zero's generation 1 is not 2 ranks"
  # log_every_steps 10: 6 lines are 60 steps at 2 ranks, past a checkpoint (every 25)
  wait_for 120 "a checkpoint at 2 ranks" steps_into_generation "$work/z-run" 1 6
  local victim
  victim=$(pgrep -f "^$DTRAIN train $work/zero.yaml" -n || true)
  [ -n "$victim" ] || fail "no worker of node 1 to kill"
  kill -KILL "$victim"
  wait_launchers "$work/z-h" "$job0" "$job1"
  c=$(generation_field "$work/z-run" resumed_from_step 2)
  [ $((c % 25)) -eq 0 ] && [ "$c" -gt "$(generation_field "$work/z-run" first_step 1)" ] ||
    fail "zero's generation 2 started from step $c, not from a checkpoint generation 1 wrote"
  grep -q '"world_size": *2' "$work/z-run/results.json" || fail "the elastic zero run did not end at 2 ranks"
  compare_with_resumed_reference "$work/zero.yaml" "$work/z-run" "$work/z-ref"
  echo "PASS (elastic zero): 1 -> 2 ranks at step $(generation_field "$work/z-run" first_step 1), a rank lost and" \
    "the job on from the checkpoint of step $c (steps lost: $(generation_field "$work/z-run" steps_lost 2))," \
    "($(wc -l <"$work/z-run/membership.jsonl") generations); the weights equal the resumed reference's"
}

test_elastic() {
  local id job0 job1 job2 s_kill s1 s2 start elapsed
  cat >"$work/elastic.yaml" <<END
name: elastic
data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: 3072, batch_size: 16,
       test_subset_size: 64}
model: {name: mlp, hidden: [32]}
optim: {name: sgd, lr: 0.02, momentum: 0.9}
parallel: {strategy: data_parallel, backend: gloo, timeout_s: 60}
train: {epochs: 40, log_every_steps: 10, checkpoint_every_epochs: 0, seed: 3}
END
  id=$("$NETNS" up 3 2>"$work/el-up.err") || {
    cat "$work/el-up.err"
    fail "netns.sh up failed"
  }
  kill_instance=$id
  rm -rf "$work/el-run"
  for i in 0 1 2; do
    elastic_host "$id" "$i" ""
    eval "job$i=$host_pid"
  done
  wait_for 120 "step 100 of the 6-rank generation" step_at_least "$work/el-run" 100
  s_kill=$(logged_step "$work/el-run")
  start=$(now)
  # shellcheck disable=SC2046  # one pid a word
  kill -KILL $(pids_in "$id-h2")
  wait "$job2" 2>/dev/null || true
  wait_for 10 "the survivors' next generation" generation_logged "$work/el-run" 1
  elapsed=$(seconds_since "$start")
  s1=$(generation_field "$work/el-run" resumed_from_step 1)
  echo "host 2 killed at logged step $s_kill; generation 1 (4 ranks) continues from the state of step $s1 after" \
    "$elapsed s"
  [ "$(generation_field "$work/el-run" world_size 1)" = 4 ] || fail "generation 1 is not 4 ranks"
  [ "$s1" -ge "$s_kill" ] || fail "generation 1 went back to step $s1 from $s_kill: the state did not come from a peer"
  [ "$(generation_field "$work/el-run" steps_lost 1)" -le 1 ] ||
    fail "generation 1 lost $(generation_field "$work/el-run" steps_lost 1) steps to the host's loss, more than the one in flight"
  wait_for 120 "50 steps at 4 ranks" steps_into_generation "$work/el-run" 1 5
  elastic_host "$id" 2 "-again"
  job2=$host_pid
  wait_for 60 "host 2's admission" generation_logged "$work/el-run" 2
  s2=$(generation_field "$work/el-run" first_step 2)
  [ "$(generation_field "$work/el-run" world_size 2)" = 6 ] || fail "generation 2 is not 6 ranks"
  [ "$(generation_field "$work/el-run" steps_lost 2)" = 0 ] || fail "generation 2 lost steps to an admission"
  echo "host 2 started again: admitted at step $s2, 6 ranks"
  # One rank of host 1: its launcher (--max-restarts 1) starts a replacement, admitted in turn.
  wait_for 120 "50 steps at 6 ranks again" steps_into_generation "$work/el-run" 2 5
  local victim="" p
  for p in $(ip netns pids "$id-h1"); do  # a worker: its command line starts with the worker's program
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$DTRAIN train "; then
      victim=$p
      break
    fi
  done
  [ -n "$victim" ] || fail "no worker of host 1 to kill"
  kill -KILL "$victim"
  # The replacement (an id ending in -1: the slot's second worker) joins the round that follows the
  # loss, or the one after it when it starts too late for that one.
  wait_for 60 "a generation of 6 ranks with the replacement" replacement_admitted "$work/el-run"
  echo "a rank of host 1 killed: its replacement admitted in generation" \
    "$(($(wc -l <"$work/el-run/membership.jsonl") - 1)) at step $(last_generation_field "$work/el-run" first_step)"
  wait_launchers "$work/el-h" "$job0" "$job1" "$job2"
  grep -q '"status": *"finished"' "$work/el-run/results.json" || fail "the elastic run did not finish"
  grep -q '"world_size": *6' "$work/el-run/results.json" || fail "the elastic run did not end at 6 ranks"
  "$NETNS" down "$id" 2>/dev/null
  kill_instance=""

  compare_with_resumed_reference "$work/elastic.yaml" "$work/el-run" "$work/el-ref"
  echo "PASS (elastic): 6 -> 4 ranks in $elapsed s from step $s1 ($(generation_field "$work/el-run" steps_lost 1)" \
    "step lost), back to 6 at step $s2, a rank lost and replaced; the weights equal those of the same steps at the" \
    "same sizes on one host"
}

# The soak (bench/elastic_kill.sh): 3 hosts x 1 rank, 20 random workers killed one after another,
# each replaced; the run must finish every step of its epochs, and no generation may train again
# more than the one step that was in flight.
test_elastic_soak() {
  local out most
  out=$(EPOCHS=300 bench/elastic_kill.sh 20 "$DTRAIN" 2>"$work/soak.err" | tail -n 1) ||
    fail "the soak: $(tail -n 3 "$work/soak.err")"
  echo "$out"
  grep -q '"finished": true' <<<"$out" || fail "the soak's run did not finish: $out"
  most=$(grep -o '"most_steps_lost_in_a_generation": [0-9]*' <<<"$out" | grep -o '[0-9]*$')
  [ "$most" -le 1 ] || fail "a generation of the soak trained $most steps again, more than the one in flight"
  echo "PASS (elastic soak): 20 kills, each replaced; the run finished, at most $most step lost per kill"
}
