#!/usr/bin/env bash
# mhbed.sh: a multi-host test bed on one machine. Each "host" is a network namespace with its own
# hostname (a UTS namespace: Open MPI tells hosts apart by name), joined to the others through a
# bridge in a "switch" namespace; Open MPI reaches the other hosts through an rsh agent that enters
# their namespace. No namespace has a link to the machine's own network: traffic stays in the bed.
#
#   mhbed.sh up BED NHOSTS [RATE [DELAY]] create hosts BED-h0..h{NHOSTS-1} at 10.77.0.1..N; with RATE
#                                         (tc units, e.g. 1gbit) every host's link is shaped in both
#                                         directions (netem, or a token bucket where the kernel lacks
#                                         netem); DELAY (e.g. 1ms) needs netem
#   mhbed.sh down BED                     remove everything `up` made (idempotent)
#   mhbed.sh exec BED HOST CMD...         run CMD inside host HOST (0..N-1) under its hostname
#   mhbed.sh mpirun BED MPIRUN-ARGS...    mpirun from host 0 with the agent, TCP only on the bed's
#                                         subnet; pass --host 10.77.0.1:2,10.77.0.2:2 (mhbed.sh hosts)
#   mhbed.sh hosts BED RANKS_PER_HOST     prints the --host argument for every host of the bed
#   mhbed.sh check                        exit 0 when this machine can build a bed (root, ip netns,
#                                         veth, bridge), else 77 with the reason on stderr
#   mhbed.sh sweep                        remove beds whose creating process is gone
#
# BED is a short name ([a-z0-9], at most 6 characters: interface names are limited to 15). State lives
# in /tmp/fsdp-mhbed/BED: the agent, the host map and the pid of the process that made it.
set -euo pipefail

STATE_ROOT=/tmp/fsdp-mhbed
SUBNET=10.77.0

die() { echo "mhbed: $*" >&2; exit 1; }
ns() { echo "fsdpmh-$1-h$2"; }
sw() { echo "fsdpmh-$1-sw"; }

valid_bed() { [[ "$1" =~ ^[a-z0-9]{1,6}$ ]] || die "bed name '$1': expected 1-6 characters of [a-z0-9]"; }

cmd_check() {
    [ "$(id -u)" = 0 ] || { echo "mhbed: needs root (network namespaces)" >&2; exit 77; }
    command -v ip >/dev/null || { echo "mhbed: needs ip (iproute2)" >&2; exit 77; }
    command -v unshare >/dev/null || { echo "mhbed: needs unshare (util-linux)" >&2; exit 77; }
    local probe="fsdpmh-probe$$"
    if ! ip netns add "$probe" 2>/dev/null; then echo "mhbed: ip netns add failed (no network namespaces here)" >&2; exit 77; fi
    local ok=1
    ip -n "$probe" link add pa type veth peer name pb 2>/dev/null || ok=0
    ip -n "$probe" link add br0 type bridge 2>/dev/null || ok=0
    ip netns del "$probe" 2>/dev/null || true
    [ $ok = 1 ] || { echo "mhbed: veth or bridge links unavailable" >&2; exit 77; }
    if ! unshare --uts true 2>/dev/null; then echo "mhbed: unshare --uts failed" >&2; exit 77; fi
    exit 0
}

cmd_down() {
    local bed=$1 dir="$STATE_ROOT/$1" n
    valid_bed "$bed"
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^fsdpmh-$bed-" || true); do
        ip netns del "$n" 2>/dev/null || true
    done
    rm -rf "$dir"
}

cmd_sweep() {
    local d bed pid
    for d in "$STATE_ROOT"/*/; do
        [ -d "$d" ] || continue
        bed=$(basename "$d")
        pid=$(cat "$d/owner" 2>/dev/null || echo 0)
        if [ "$pid" = 0 ] || ! kill -0 "$pid" 2>/dev/null; then cmd_down "$bed"; fi
    done
}

write_agent() {
    local dir=$1 bed=$2
    # Open MPI runs `agent HOST COMMAND...` as it would run ssh: the command is one shell string
    cat >"$dir/agent" <<EOF
#!/bin/sh
# rsh agent of bed $bed: enters the namespace of HOST and runs the command there under its hostname
host=\$1; shift
i=\$(awk -v h="\$host" '\$1 == h || \$2 == h {print \$3; exit}' "$dir/hosts")
[ -n "\$i" ] || { echo "mhbed agent: unknown host \$host" >&2; exit 1; }
exec ip netns exec fsdpmh-$bed-h\$i unshare --uts sh -c "hostname $bed-h\$i; \$*"
EOF
    chmod +x "$dir/agent"
}

# shape NS DEV RATE DELAY: netem (rate and delay) where the kernel has it, else a token bucket (rate
# only; a delay then fails: this kernel cannot add one)
shape() {
    if ip netns exec "$1" tc qdisc add dev "$2" root netem rate "$3" delay "${4:-0ms}" limit 100000 2>/dev/null; then return; fi
    [ -z "$4" ] || die "link delay $4: this kernel has no netem qdisc (shape the rate alone)"
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$3" burst 256kb latency 200ms
}

cmd_up() {
    local bed=$1 nhosts=$2 rate=${3:-} delay=${4:-} i dir="$STATE_ROOT/$1"
    valid_bed "$bed"
    [[ "$nhosts" =~ ^[0-9]+$ ]] && [ "$nhosts" -ge 1 ] && [ "$nhosts" -le 32 ] || die "NHOSTS '$nhosts': expected 1..32"
    cmd_down "$bed"
    mkdir -p "$dir"
    echo "${MHBED_OWNER:-$PPID}" >"$dir/owner"
    : >"$dir/hosts"
    trap 'cmd_down "$bed"' EXIT  # any failure (set -e, die) removes the half-made bed
    ip netns add "$(sw "$bed")"
    ip -n "$(sw "$bed")" link add br0 type bridge
    ip -n "$(sw "$bed")" link set br0 up
    for ((i = 0; i < nhosts; i++)); do
        local h; h=$(ns "$bed" "$i")
        ip netns add "$h"
        ip link add "mh$bed$i" type veth peer name "mb$bed$i"
        ip link set "mh$bed$i" netns "$h" name eth0
        ip link set "mb$bed$i" netns "$(sw "$bed")"
        ip -n "$(sw "$bed")" link set "mb$bed$i" master br0 up
        ip -n "$h" addr add "$SUBNET.$((i + 1))/24" dev eth0
        ip -n "$h" link set lo up
        ip -n "$h" link set eth0 up
        if [ -n "$rate" ]; then
            # egress of the host and of its switch port: both directions of the link are shaped
            shape "$h" eth0 "$rate" "$delay"
            shape "$(sw "$bed")" "mb$bed$i" "$rate" "$delay"
        fi
        echo "$SUBNET.$((i + 1)) $bed-h$i $i" >>"$dir/hosts"
    done
    write_agent "$dir" "$bed"
    trap - EXIT
}

host_index() { # BED HOST -> checks HOST is a host of the bed
    local n; n=$(wc -l <"$STATE_ROOT/$1/hosts" 2>/dev/null || echo 0)
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -lt "$n" ] || die "bed $1 has no host $2 (is it up?)"
}

cmd_exec() {
    local bed=$1 i=$2; shift 2
    valid_bed "$bed"; host_index "$bed" "$i"
    exec ip netns exec "$(ns "$bed" "$i")" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$bed-h$i" "$@"
}

cmd_hosts() {
    local bed=$1 per=$2
    valid_bed "$bed"
    [ -f "$STATE_ROOT/$bed/hosts" ] || die "bed $bed is not up"
    awk -v p="$per" '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, p} END {print ""}' "$STATE_ROOT/$bed/hosts"
}

cmd_mpirun() {
    local bed=$1; shift
    valid_bed "$bed"; host_index "$bed" 0
    local dir="$STATE_ROOT/$bed"
    cmd_exec "$bed" 0 mpirun --mca plm_rsh_agent "$dir/agent" \
        --mca btl tcp,self,vader --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
        --oversubscribe --bind-to none "$@"
}

case "${1:-}" in
up) shift; [ $# -ge 2 ] || die "usage: mhbed.sh up BED NHOSTS [RATE DELAY]"; cmd_up "$@" ;;
down) shift; [ $# -eq 1 ] || die "usage: mhbed.sh down BED"; cmd_down "$1" ;;
exec) shift; [ $# -ge 3 ] || die "usage: mhbed.sh exec BED HOST CMD..."; cmd_exec "$@" ;;
mpirun) shift; [ $# -ge 2 ] || die "usage: mhbed.sh mpirun BED MPIRUN-ARGS..."; cmd_mpirun "$@" ;;
hosts) shift; [ $# -eq 2 ] || die "usage: mhbed.sh hosts BED RANKS_PER_HOST"; cmd_hosts "$@" ;;
check) cmd_check ;;
sweep) cmd_sweep ;;
*) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; [ "${1:-}" = --help ] || exit 2 ;;
esac
