#!/usr/bin/env bash
# `dtrain launch --hostfile` end to end over real ssh: two hosts made by bench/netns.sh, each with an
# OpenSSH server of the test's own (host key, authorized key, configuration and pid file in a
# temporary directory; nothing in ~/.ssh or /etc/ssh is read or written). Modes:
#   train  2 hosts x 1 rank train the quickstart config briefly (mlp, 10 steps); the final weights
#          (model.pt) must equal, byte for byte, those of `dtrain launch --nproc-per-node 2` on one
#          host, and every host's output must come back prefixed with its address
#   stop   a long job on 2 hosts, stopped by `dtrain launch --hostfile FILE --stop JOB` from another
#          shell: the launch ends, and no launcher or worker of the job is left on either host
# Exits 77 (CTest's SKIP_RETURN_CODE) with the reason where namespaces or sshd are unavailable.
# Everything it starts (sshd, namespaces, the job) is removed on exit, also on failure.
#   tests/ssh/ssh_test.sh train|stop DTRAIN SOURCE_DIR
set -euo pipefail
MODE=${1:?mode: train or stop}
DTRAIN=$(readlink -f "${2:?path of the dtrain binary}")
cd "${3:?the source directory}"
NETNS=$PWD/bench/netns.sh
SSHD=/usr/sbin/sshd
OVERRIDES=(model.name=mlp data.subset_size=2560 data.test_subset_size=500 train.checkpoint_every_epochs=0
  train.log_every_steps=5)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "SKIPPED: $*" >&2
  exit 77
}

work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-ssh-test-XXXXXX")
id=""
made_run_sshd=0
job=""
cleanup() {
  local f
  for f in "$work"/sshd-*.pid; do [ ! -f "$f" ] || kill "$(cat "$f")" 2>/dev/null || true; done
  [ -z "$id" ] || "$NETNS" down "$id" 2>/dev/null || true
  [ "$made_run_sshd" = 0 ] || rmdir /run/sshd 2>/dev/null || true
  if [ -n "$job" ]; then
    pkill -KILL -f -- "--run-id $job " 2>/dev/null || true
    rm -rf "$HOME/.dtrain/jobs/$job"
    rmdir "$HOME/.dtrain/jobs" "$HOME/.dtrain" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (ip netns add)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
[ -x "$SSHD" ] || skip "no OpenSSH server ($SSHD); install openssh-server (scripts/install-deps.sh does)"
if ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
  skip "no ssh client; install openssh-client"
fi
compgen -G "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte*" >/dev/null ||
  skip "Fashion-MNIST is not installed (the quickstart's data set); install dataset-fashion-mnist"
id=$("$NETNS" up 2 2>"$work/netns.err") || {
  id=""
  skip "network namespaces cannot be made here: $(grep -v '^netns.sh: dtrain' "$work/netns.err" | head -n 3)"
}
mapfile -t addresses <"/run/dtrain-netns/$id/hostfile"

# One sshd per host, on keys of this test. sshd needs its privilege separation directory.
if [ ! -d /run/sshd ]; then
  mkdir -m 755 /run/sshd
  made_run_sshd=1
fi
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/user_key"
cp "$work/user_key.pub" "$work/authorized_keys"
for i in 0 1; do
  cat >"$work/sshd_config.h$i" <<CONF
ListenAddress ${addresses[$i]}
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
PidFile $work/sshd-h$i.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
CONF
  # Daemonised, it writes its pid file once it listens.
  "$NETNS" exec "$id-h$i" "$SSHD" -f "$work/sshd_config.h$i" -E "$work/sshd-h$i.log" ||
    fail "sshd did not start in $id-h$i: $(cat "$work/sshd-h$i.log" 2>/dev/null)"
done
# What ssh is told through --ssh-option: this test's key and known-hosts file, no user configuration.
SSH_OPTIONS="-F /dev/null -i $work/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=$work/known_hosts -o LogLevel=ERROR"
for i in 0 1; do
  ready=0
  for _ in $(seq 100); do
    # shellcheck disable=SC2086  # options are words
    if "$NETNS" exec "$id-h0" ssh $SSH_OPTIONS -o BatchMode=yes "${addresses[$i]}" true 2>"$work/ssh-probe.err"; then
      ready=1
      break
    fi
    sleep 0.1
  done
  [ "$ready" = 1 ] || fail "cannot ssh to ${addresses[$i]}: $(cat "$work/ssh-probe.err") $(cat "$work/sshd-h$i.log")"
done
echo "two hosts ${addresses[*]} ($id), an sshd on each"
printf '# the hosts of bench/netns.sh instance %s\n%s slots=1\n\n%s slots=1  # the second\n' "$id" \
  "${addresses[0]}" "${addresses[1]}" >"$work/hostfile"

# dtrain launch --hostfile in host 0, as a user on the first node would run it.
on_host0() { "$NETNS" exec "$id-h0" "$@"; }

test_train() {
  "$DTRAIN" launch --nproc-per-node 2 --threads 1 --log-dir "$work/one-host.logs" -- \
    "$DTRAIN" train configs/quickstart.yaml "${OVERRIDES[@]}" train.max_steps=10 --run-dir "$work/one-host" \
    >"$work/one-host.out" 2>"$work/one-host.err" || {
    tail -n 30 "$work/one-host.err"
    fail "the one-host run failed"
  }
  echo "one host, 2 ranks: $(md5sum <"$work/one-host/model.pt" | cut -c1-32)"
  on_host0 "$DTRAIN" launch --hostfile "$work/hostfile" --ssh-option "$SSH_OPTIONS" --threads 1 --timeout 120 -- \
    "$DTRAIN" train configs/quickstart.yaml "${OVERRIDES[@]}" train.max_steps=10 --run-dir "$work/two-hosts" \
    >"$work/two-hosts.out" 2>"$work/two-hosts.err" || {
    tail -n 40 "$work/two-hosts.out" "$work/two-hosts.err"
    fail "the two-host run over ssh failed"
  }
  head -n 20 "$work/two-hosts.err"
  grep -q "^\[${addresses[1]}\] dtrain launch: " "$work/two-hosts.err" ||
    fail "no output of host 1's launcher came back prefixed with its host ${addresses[1]}"
  grep -q "^\[${addresses[0]}\] " "$work/two-hosts.out" || fail "rank 0's output did not come back prefixed"
  grep -q "finished on every host" "$work/two-hosts.err" || fail "the launcher did not report the end of the job"
  echo "two hosts x 1 rank over ssh: $(md5sum <"$work/two-hosts/model.pt" | cut -c1-32)"
  if ! cmp -s "$work/one-host/model.pt" "$work/two-hosts/model.pt"; then
    /usr/bin/python3 - "$work/one-host/model.pt" "$work/two-hosts/model.pt" <<'PY' || true
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:])
for k in a:
    print(f"{k}: max |difference| {(a[k].double() - b[k].double()).abs().max().item():.3g}")
PY
    fail "two hosts x 1 rank over ssh ended with other weights than one host x 2 ranks"
  fi
  [ ! -e "$HOME/.dtrain/jobs" ] || [ -z "$(ls -A "$HOME/.dtrain/jobs")" ] || fail "pid files left in ~/.dtrain/jobs"
  echo "PASS: dtrain launch --hostfile over ssh trains to the weights of one host with 2 ranks, bit for bit"
}

test_stop() {
  local pid status=0 left
  job=ssh-test-stop-$$
  on_host0 "$DTRAIN" launch --hostfile "$work/hostfile" --ssh-option "$SSH_OPTIONS" --job-id "$job" --threads 1 \
    --stop-grace 2 -- "$DTRAIN" train configs/quickstart.yaml "${OVERRIDES[@]}" train.max_steps=1000000 \
    train.epochs=1000 --run-dir "$work/stopped" >"$work/stopped.out" 2>"$work/stopped.err" &
  pid=$!
  # Both hosts run once each has recorded its launcher, and the workers have begun (rank 1's log).
  for _ in $(seq 300); do
    [ -s "$HOME/.dtrain/jobs/$job/node0.pid" ] && [ -s "$HOME/.dtrain/jobs/$job/node1.pid" ] &&
      pgrep -f -- "--run-dir $work/stopped" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null || {
    cat "$work/stopped.err"
    fail "the long job ended before it was stopped"
  }
  [ -s "$HOME/.dtrain/jobs/$job/node1.pid" ] || fail "host 1 recorded no launcher pid for job $job"
  local host1_launcher
  host1_launcher=$(cat "$HOME/.dtrain/jobs/$job/node1.pid")
  on_host0 "$DTRAIN" launch --hostfile "$work/hostfile" --ssh-option "$SSH_OPTIONS" --stop "$job" \
    >"$work/stop.out" 2>&1 || {
    cat "$work/stop.out"
    fail "dtrain launch --stop $job failed"
  }
  cat "$work/stop.out"
  # Host 0's launcher, stopped first, takes the job down: host 1's may end on its own (and remove its
  # pid file) before its stop arrives, which then finds it gone. Either way it must be gone.
  if ! grep -q "^\[${addresses[1]}\] job $job: stopped its launcher" "$work/stop.out"; then
    grep -q "^\[${addresses[1]}\] job $job: not running here" "$work/stop.out" || fail "host 1 did not stop its launcher"
    ! kill -0 "$host1_launcher" 2>/dev/null || fail "host 1's launcher (pid $host1_launcher) runs after --stop"
  fi
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ! kill -0 "$pid" 2>/dev/null || fail "dtrain launch --hostfile still runs 30 s after --stop"
  wait "$pid" || status=$?
  [ "$status" -ne 0 ] || fail "a stopped job's launch exited 0"
  left=$(pgrep -af -- "--run-id $job |--run-dir $work/stopped" || true)
  [ -z "$left" ] || fail "processes of job $job are left: $left"
  [ ! -e "$HOME/.dtrain/jobs/$job" ] || fail "the job directory ~/.dtrain/jobs/$job was left behind"
  echo "PASS: --stop $job ended the launch (exit $status) and left no launcher or worker on either host"
}

case $MODE in
  train) test_train ;;
  stop) test_stop ;;
  *) fail "unknown mode '$MODE'; expected train or stop" ;;
esac
