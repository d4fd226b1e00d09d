#!/usr/bin/env bash
# Several hosts on one machine: K network namespaces ("hosts") joined by veth pairs to a bridge that
# lives in a namespace of its own ("switch"), each host's link optionally limited in rate (tc tbf, both
# directions) and delayed (tc netem, one way), for multi-host runs and bandwidth-limited benchmarks
# without a cluster. Nothing is added to the root namespace: no interface, no address, no route, so
# traffic between the hosts cannot leave them. Needs root and iproute2.
#
#   bench/netns.sh up K [--rate 1gbit] [--delay 1ms]   create; prints the instance id, dtrain-<pid>
#   bench/netns.sh exec NAME CMD...        run CMD in host NAME (dtrain-<pid>-h1, or h1 with DTRAIN_NETNS set)
#   bench/netns.sh down [ID]               remove an instance: its processes, links, namespaces and files
#   bench/netns.sh run K [--rate R] [--delay D] [--timeout S] [--log-dir DIR] -- CMD...
#                                          up, CMD in every host at once, then down (always, also on
#                                          failure or interruption); the exit status is the first failure's
#   bench/netns.sh list                    instances and their hosts
#   bench/netns.sh rsh HOST CMD...         mpirun's launch agent between hosts (set in every host's
#                                          environment as OMPI_MCA_plm_rsh_agent); HOST is a name or address
#
# Instance dtrain-<pid>: namespaces dtrain-<pid>-sw (bridge br0, one port hI per host) and dtrain-<pid>-hI,
# I = 0..K-1, whose eth0 has 10.213.0.(I+1)/24, a private range used only inside these namespaces. A
# command run by `exec` or `run` sees the host's own host name (dtrain-<pid>-hI, in a UTS namespace of its
# own) and an /etc/hosts naming every host of the instance (ip netns exec mounts /etc/netns/<ns>/hosts),
# so that, as on real hosts, the host name resolves to the host's address (Gloo picks its interface so).
# Its environment has DTRAIN_NETNS=<id>, DTRAIN_NETNS_HOSTFILE (every address, one a line) and
# OMPI_MCA_plm_rsh_agent; `run` adds HOST_INDEX, HOST_ADDR, HOST_COUNT and MASTER_ADDR (host 0's address).
#
# Limits: --rate R (tc units: 100mbit, 1gbit) shapes every host's link in both directions with tbf, on
# the host's eth0 (what it sends) and on its switch port (what it receives), like a full-duplex NIC of
# that speed; tbf counts Ethernet frames, so TCP payload reaches about 95% of R. --delay D (10ms, 500us)
# adds D with netem to what each host sends: one way D, round trip 2*D. A limit the kernel cannot apply
# (no sch_tbf or sch_netem) is an error, never ignored.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) ends the script too

SELF=$(readlink -f "${BASH_SOURCE[0]}")
STATE_ROOT=/run/dtrain-netns
SUBNET=10.213.0  # hosts are .1 .. .K
MAX_HOSTS=64

say() { echo "netns.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

usage() {
  sed -n '/^#   bench/,/^#$/p' "$SELF" | sed 's/^# \{0,3\}//' >&2
  exit 2
}

require_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (ip netns add, tc); run it as root or with sudo"
  command -v ip >/dev/null || die "no 'ip' command; install iproute2"
}

# Host names and addresses of an instance, one "NAMESPACE ADDRESS" a line.
hosts_file() { echo "$STATE_ROOT/$1/hosts"; }

# rate in tc units -> bytes per second (tc's SI prefixes: 1kbit = 1000 bit/s, 1kbps = 1000 bytes/s).
rate_bytes_per_second() {
  local value unit
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)(bit|bps)$ ]] ||
    die "--rate: expected a number and a tc unit such as 100mbit or 1gbit, found '$1'"
  value=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[3]}${BASH_REMATCH[4]}
  awk -v v="$value" -v u="$unit" 'BEGIN {
    p = substr(u, 1, 1); m = 1
    if (p == "k") m = 1e3; else if (p == "m") m = 1e6; else if (p == "g") m = 1e9; else if (p == "t") m = 1e12
    b = (u ~ /bit$/) ? v * m / 8 : v * m
    printf "%d\n", b }'
}

check_delay() {
  [[ $1 =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "--delay: expected a time with a unit such as 500us, 1ms or 20ms, found '$1'"
}

# tc on one device of one namespace: tbf for the rate, netem (parent of tbf) for the delay.
# tbf's bucket holds 2 ms at the rate (at least 32 KB, more than one GSO segment's frames), its queue
# 20 ms beyond that: enough for a TCP stream to keep the link busy, little enough to add no latency
# worth speaking of.
apply_limits() {
  local ns=$1 dev=$2 rate=$3 delay=$4 parent=root bytes burst
  if [ -n "$delay" ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 ||
      die "tc netem on $ns:$dev failed; --delay needs the kernel's netem qdisc (CONFIG_NET_SCH_NETEM)"
    parent="parent 1:1"
  fi
  if [ -n "$rate" ]; then
    bytes=$(rate_bytes_per_second "$rate")
    burst=$((bytes / 500 > 32768 ? bytes / 500 : 32768))
    # shellcheck disable=SC2086  # parent is two words or one
    ip netns exec "$ns" tc qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst "$burst" latency 20ms ||
      die "tc tbf on $ns:$dev failed; --rate needs the kernel's tbf qdisc (CONFIG_NET_SCH_TBF)"
  fi
}

# Creates instance $1 with $2 hosts; on any failure the caller's trap removes what was made.
create_instance() {
  local id=$1 count=$2 rate=$3 delay=$4 sw="$1-sw" i ns addr
  mkdir -p "$STATE_ROOT/$id"
  printf 'created=%s by pid %s\nhosts=%s\nrate=%s\ndelay=%s\n' "$(date -u +%FT%TZ)" "$$" "$count" \
    "${rate:-none}" "${delay:-none}" \
    >"$STATE_ROOT/$id/config"
  : >"$(hosts_file "$id")"
  : >"$STATE_ROOT/$id/hostfile"

  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  say "$id: switch namespace $sw, bridge br0 (no address, no route)"
  for ((i = 0; i < count; i++)); do
    ns="$id-h$i"
    addr="$SUBNET.$((i + 1))"
    ip netns add "$ns"
    echo "$ns $addr" >>"$(hosts_file "$id")"
    echo "$addr" >>"$STATE_ROOT/$id/hostfile"
    # The pair is made between the two namespaces: neither end ever exists in the root namespace.
    ip -n "$sw" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "h$i" master br0
    ip -n "$sw" link set "h$i" up
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6' 2>/dev/null || true
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    apply_limits "$ns" eth0 "$rate" "$delay"  # what host i sends
    apply_limits "$sw" "h$i" "$rate" ""       # what host i receives
    say "$id: host $ns  eth0 $addr/24 <-> $sw:h$i  rate ${rate:-unlimited}  delay ${delay:-none}"
  done
  # Every host resolves every host's name, and its own host name to its own address.
  for ((i = 0; i < count; i++)); do
    mkdir -p "/etc/netns/$id-h$i"
    {
      echo "127.0.0.1 localhost"
      while read -r ns addr; do echo "$addr $ns ${ns##*-}"; done <"$(hosts_file "$id")"
    } >"/etc/netns/$id-h$i/hosts"
  done
}

# The namespaces of instance $1 that exist now.
instance_namespaces() {
  ip netns list | awk '{print $1}' | grep -E "^$1-(sw|h[0-9]+)$" || true
}

# Removes instance $1: stops what still runs in its namespaces, deletes its veth pairs, bridge and
# namespaces, its /etc/netns files and its state, then checks that nothing of it is left.
remove_instance() {
  local id=$1 ns pids left round
  [[ $id =~ ^dtrain-[0-9]+$ ]] || die "not an instance id: '$id' (expected dtrain-<pid>)"
  for round in TERM TERM TERM TERM TERM KILL; do
    pids=""
    for ns in $(instance_namespaces "$id"); do pids+=" $(ip netns pids "$ns" | tr '\n' ' ')"; done
    pids=$(xargs <<<"$pids")
    [ -z "$pids" ] && break
    [ "$round" = TERM ] || say "$id: processes still running after 5 s, killing: $pids"
    # shellcheck disable=SC2086
    kill -"$round" $pids 2>/dev/null || true
    sleep 1
  done
  if ip netns list | grep -q "^$id-sw\b"; then
    for dev in $(ip -n "$id-sw" -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip -n "$id-sw" link del "$dev" && say "$id: deleted veth pair $id-sw:$dev <-> eth0"
    done
    ip -n "$id-sw" link del br0 2>/dev/null && say "$id: deleted bridge $id-sw:br0"
  fi
  for ns in $(instance_namespaces "$id"); do
    ip netns del "$ns" && say "$id: deleted namespace $ns"
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null || true  # only when no other instance (or anyone else) uses it
  rm -rf "${STATE_ROOT:?}/$id"
  rmdir "$STATE_ROOT" 2>/dev/null || true
  left=$(instance_namespaces "$id")
  [ -z "$left" ] || die "$id: namespaces left after down: $left"
  say "$id: removed, nothing left"
}

# The single instance when $DTRAIN_NETNS is unset and exactly one exists.
default_instance() {
  local all
  if [ -n "${DTRAIN_NETNS:-}" ]; then
    echo "$DTRAIN_NETNS"
    return
  fi
  all=$(find "$STATE_ROOT" -mindepth 1 -maxdepth 1 -name 'dtrain-*' -printf '%f\n' 2>/dev/null || true)
  [ "$(echo "$all" | grep -c .)" -eq 1 ] ||
    die "name the instance (argument or DTRAIN_NETNS=dtrain-<pid>); instances: ${all:-none}"
  echo "$all"
}

# Runs CMD in namespace $1 with the host's name and the instance's environment.
exec_in() {
  local ns=$1 id=${1%-h*}
  shift
  ip netns list | grep -q "^$ns\b" || die "no host namespace '$ns'"
  export DTRAIN_NETNS="$id" DTRAIN_NETNS_HOSTFILE="$STATE_ROOT/$id/hostfile"
  export OMPI_MCA_plm_rsh_agent="$SELF rsh"
  # ip netns exec leaves the UTS namespace alone: a private one gives the host its own name, which
  # its /etc/hosts maps to its address (and which OpenMPI takes for the node's name).
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  exec ip netns exec "$ns" unshare --uts /bin/sh -c \
    'printf %s "$0" >/proc/sys/kernel/hostname && exec "$@"' "$ns" "$@"
}

host_namespace() {  # NAME -> namespace: dtrain-<pid>-hI as is, hI or an address within $DTRAIN_NETNS
  local name=$1 id ns addr
  if [[ $name =~ ^dtrain-[0-9]+-h[0-9]+$ ]]; then
    echo "$name"
    return
  fi
  id=$(default_instance)
  while read -r ns addr; do
    if [ "$name" = "$addr" ] || [ "$name" = "${ns##*-}" ]; then
      echo "$ns"
      return
    fi
  done <"$(hosts_file "$id")"
  die "no host '$name' in instance $id"
}

parse_limits() {  # sets count rate delay timeout log_dir rest[] from "K [opts] [-- CMD...]"
  count=${1:-}
  if ! [[ $count =~ ^[0-9]+$ ]] || [ "$count" -lt 1 ] || [ "$count" -gt $MAX_HOSTS ]; then
    die "expected a number of hosts from 1 to $MAX_HOSTS, found '${count}'"
  fi
  shift
  rate="" delay="" timeout=3600 log_dir="" rest=()
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=${2:?--rate needs a value}; rate_bytes_per_second "$rate" >/dev/null; shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; check_delay "$delay"; shift 2 ;;
      --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
      --log-dir) log_dir=${2:?--log-dir needs a directory}; shift 2 ;;
      --) shift; rest=("$@"); break ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  if ! [[ $timeout =~ ^[0-9]+$ ]] || [ "$timeout" -lt 1 ]; then
    die "--timeout: expected seconds, found '$timeout'"
  fi
}

# The instance being made, global: an exit through set -e runs the EXIT trap outside the function.
instance=""

cmd_up() {
  local count rate delay timeout log_dir rest id
  parse_limits "$@"
  [ ${#rest[@]} -eq 0 ] || die "up: no command expected; 'run' runs one in every host"
  require_root
  id="dtrain-$$"
  [ -z "$(instance_namespaces "$id")" ] || die "$id exists already (a stale instance?); remove it: $SELF down $id"
  instance=$id
  trap 'remove_instance "$instance"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  create_instance "$id" "$count" "$rate" "$delay"
  trap - EXIT INT TERM HUP
  say "$id: up; run commands with: $SELF exec $id-h0 CMD...; remove with: $SELF down $id"
  echo "$id"
}

cmd_run() {
  local count rate delay timeout log_dir rest id i ns pid status host failed=0
  local -A running=()  # pid -> host index
  parse_limits "$@"
  [ ${#rest[@]} -gt 0 ] || die "run: expected '-- CMD ...' after the options"
  require_root
  id="dtrain-$$"
  [ -z "$(instance_namespaces "$id")" ] || die "$id exists already (a stale instance?); remove it: $SELF down $id"
  [ -z "$log_dir" ] || mkdir -p "$log_dir"
  instance=$id
  run_pids=()
  run_status=0
  trap 'run_status=$?; [ ${#run_pids[@]} -eq 0 ] || kill "${run_pids[@]}" 2>/dev/null; remove_instance "$instance"; exit $run_status' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  create_instance "$id" "$count" "$rate" "$delay"
  for ((i = 0; i < count; i++)); do
    ns="$id-h$i"
    (
      export HOST_INDEX=$i HOST_ADDR="$SUBNET.$((i + 1))" HOST_COUNT=$count MASTER_ADDR="$SUBNET.1"
      [ -z "$log_dir" ] || exec >"$log_dir/h$i.log" 2>&1
      exec timeout --kill-after=10 "$timeout" "$SELF" exec "$ns" "${rest[@]}"
    ) &
    running[$!]=$i
    run_pids+=($!)
  done
  # The first host to fail stops the others: they may be waiting for it.
  while [ ${#running[@]} -gt 0 ]; do
    status=0
    pid=""
    wait -n -p pid "${!running[@]}" || status=$?
    [ -n "$pid" ] || break
    host=${running[$pid]}
    unset "running[$pid]"
    if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
      failed=$status
      say "$id: host h$host exited with status $status$([ "$status" -ne 124 ] || echo " (--timeout $timeout s)"); stopping the others"
      [ ${#running[@]} -eq 0 ] || kill "${!running[@]}" 2>/dev/null || true
    fi
  done
  run_pids=()
  exit "$failed"
}

cmd_down() {
  require_root
  remove_instance "${1:-$(default_instance)}"
}

cmd_exec() {
  [ $# -ge 2 ] || die "exec: expected a host name and a command"
  require_root
  local ns
  ns=$(host_namespace "$1")
  shift
  exec_in "$ns" "$@"
}

cmd_list() {
  local dir id
  for dir in "$STATE_ROOT"/dtrain-*; do
    [ -d "$dir" ] || continue
    id=${dir##*/}
    echo "$id: $(tr '\n' ' ' <"$STATE_ROOT/$id/config")"
    sed 's/^/  /' "$(hosts_file "$id")"
  done
}

# mpirun's rsh/ssh launch agent: `AGENT [options] HOST CMD...`, CMD a remote-shell command line.
cmd_rsh() {
  while [[ ${1:-} == -* ]]; do shift; done  # options meant for ssh (e.g. -x)
  [ $# -ge 2 ] || die "rsh: expected a host and a command"
  local ns
  ns=$(host_namespace "$1")
  shift
  exec_in "$ns" /bin/sh -c "$*"
}

case ${1:-} in
  up | run | down | exec | list | rsh)
    command=$1
    shift
    "cmd_$command" "$@"
    ;;
  *) usage ;;
esac
