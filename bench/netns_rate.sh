#!/usr/bin/env bash
# Does bench/netns.sh's --rate hold? For each rate, two hosts of bench/netns.sh:
#   tcp   one bounded TCP stream h0 -> h1 (about SECONDS at the rate), timed at the receiver
#         (bench/netns_tcp.py); beside its payload rate, the rate of what tbf counts, Ethernet
#         frames (the payload rate scaled by the bytes h0's qdisc sent over the payload bytes);
#         then 200 one-byte TCP round trips h0 -> h1 -> h0 (median, which --delay D raises by 2*D)
#   gloo  dtrain bench comm, all-reduce of 16 MB, one rank per host, `dtrain launch` on each host
#   mpi   the same over mpirun started in h0, reaching h1 through netns.sh's launch agent
# busbw is nccl-tests' bus bandwidth (from the median time: the JSON's GB/s are rounded to 8 Mbit/s);
# for two ranks it is what each direction of the link carries.
# Prints one JSON line per measurement on stderr and a Markdown table on stdout. Needs root.
#   bench/netns_rate.sh [BUILD_DIR=build] [RATES="none 1gbit 100mbit"] [SECONDS=3] [DELAY=none]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RATES=${2:-"none 1gbit 100mbit"}
SECONDS_EACH=${3:-3}
DELAY=${4:-none}
DTRAIN=$(readlink -f "$BUILD/bin/dtrain")
PY=/usr/bin/python3
[ -x "$DTRAIN" ] || { echo "netns_rate.sh: no $BUILD/bin/dtrain; build it first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl
export DTRAIN PY SECONDS_EACH

failed() {  # what
  echo "netns_rate.sh: the $1 measurement failed:" >&2
  tail -n 20 "$work/netns.err" "$work"/*/h*.log >&2
  exit 1
}

limit_args() {  # rate
  [ "$1" = none ] || echo "--rate $1"
  [ "$DELAY" = none ] || echo "--delay $DELAY"
}

# TCP payload bytes for about SECONDS_EACH at the rate; 1 GB without a limit.
stream_bytes() {
  [ "$1" = none ] && { echo 1000000000; return; }
  $PY -c "
import re, sys
v, p, u = re.fullmatch(r'([0-9.]+)([kmgt]?)(bit|bps)', sys.argv[1]).groups()
scale = {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}[p] / (8 if u == 'bit' else 1)
print(int(float(v) * scale * float(sys.argv[2])))" "$1" "$SECONDS_EACH"
}

measure_tcp() {  # rate
  local rate=$1 bytes
  bytes=$(stream_bytes "$rate")
  # shellcheck disable=SC2046,SC2016
  bench/netns.sh run 2 $(limit_args "$rate") --timeout 120 --log-dir "$work/tcp" -- sh -c '
    if [ "$HOST_INDEX" = 1 ]; then
      $PY bench/netns_tcp.py recv "$HOST_ADDR" 5201
      exec $PY bench/netns_tcp.py pong "$HOST_ADDR" 5202
    fi
    peer=$(sed -n 2p "$DTRAIN_NETNS_HOSTFILE")
    sent() { tc -s qdisc show dev eth0 | awk "/Sent/ {print \$2; exit}"; }
    before=$(sent)
    $PY bench/netns_tcp.py send "$peer" 5201 '"$bytes"'
    echo "{\"qdisc_sent_bytes\": $(( $(sent) - before ))}"
    $PY bench/netns_tcp.py ping "$peer" 5202 200' 2>"$work/netns.err" || failed tcp
  $PY - "$rate" "$work/tcp/h1.log" "$work/tcp/h0.log" >>"$results" <<'PYEOF'
import json, sys
def lines(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            out.update(json.loads(line))
    return out
rate, recv, send = sys.argv[1], lines(sys.argv[2]), lines(sys.argv[3])
# Without a limit the device has no qdisc (noqueue) and nothing counts frames.
link = recv["bytes_per_s"] * send["qdisc_sent_bytes"] / recv["bytes"] if send["qdisc_sent_bytes"] else None
print(json.dumps({"rate": rate, "what": "tcp", "payload_mbit_per_s": recv["mbit_per_s"],
                  "link_mbit_per_s": round(link * 8 / 1e6, 1) if link else None, "bytes": recv["bytes"],
                  "seconds": recv["seconds"], "qdisc_sent_bytes": send["qdisc_sent_bytes"],
                  "median_rtt_us": send["median_rtt_us"]}))
PYEOF
}

measure_comm() {  # rate backend
  local rate=$1 backend=$2
  local bench="$DTRAIN bench comm --backend $backend --op allreduce --sizes 16M --iters 5 --warmup 1"
  # shellcheck disable=SC2046,SC2016
  bench/netns.sh run 2 $(limit_args "$rate") --timeout 300 --log-dir "$work/$backend" -- sh -c '
    if [ '"$backend"' = gloo ]; then
      exec $DTRAIN launch --nnodes 2 --node-rank "$HOST_INDEX" --nproc-per-node 1 --threads 1 \
        --master-addr "$MASTER_ADDR" --master-port 29500 --log-dir "'"$work/$backend"'/ranks-h$HOST_INDEX" -- '"$bench"'
    elif [ "$HOST_INDEX" = 0 ]; then
      OMPI_MCA_orte_default_dash_host=$(paste -sd, "$DTRAIN_NETNS_HOSTFILE") \
        exec $DTRAIN launch --backend mpi --nproc-per-node 2 --threads 1 --log-dir "'"$work/$backend"'/ranks" -- '"$bench"'
    fi' 2>"$work/netns.err" || failed "$backend"
  grep -h '^{"op"' "$work/$backend/h0.log" | tail -n 1 |
    $PY -c "import json, sys; r = json.load(sys.stdin); print(json.dumps({'rate': '$rate', 'what': '$backend',
'busbw_mbit_per_s': round(r['bytes'] * 8 / r['median_us'] * 2 * (r['world'] - 1) / r['world'], 1),
'bytes': r['bytes'], 'median_us': r['median_us']}))" >>"$results"
}

for rate in $RATES; do
  echo "rate $rate" >&2
  measure_tcp "$rate"
  measure_comm "$rate" gloo
  measure_comm "$rate" mpi
done
cat "$results" >&2

$PY - "$results" <<'PYEOF'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def mbit(rate):
    if rate == "none":
        return None
    v, p, u = re.fullmatch(r"([0-9.]+)([kmgt]?)(bit|bps)", rate).groups()
    return float(v) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[p] * (1 if u == "bit" else 8) / 1e6
def cell(v, rate):
    if v is None:
        return "n/a (no qdisc)"
    return f"{v:.1f}" + (f" ({v / mbit(rate):.1%})" if mbit(rate) else "")
print("| --rate | TCP payload Mbit/s | link Mbit/s (frames, as tbf counts) | gloo all-reduce busbw Mbit/s | mpi all-reduce busbw Mbit/s | TCP round trip, median |")
print("|---|---|---|---|---|---|")
for rate in dict.fromkeys(r["rate"] for r in rows):
    get = {r["what"]: r for r in rows if r["rate"] == rate}
    print(f"| {rate} | {cell(get['tcp']['payload_mbit_per_s'], rate)} | {cell(get['tcp']['link_mbit_per_s'], rate)} "
          f"| {cell(get['gloo']['busbw_mbit_per_s'], rate)} | {cell(get['mpi']['busbw_mbit_per_s'], rate)} "
          f"| {get['tcp']['median_rtt_us']:.0f} us |")
PYEOF
