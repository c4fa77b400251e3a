# Shell helpers for tests run inside the emulated CXL host (busybox sh).
# Sourced by the guest scripts of the VM integration tests.

CG=/sys/fs/cgroup

# mkcg PATH: creates a cgroup (and its parents) with the memory controller
# enabled on the way down.
mkcg() {
    local cur=$CG part
    for part in $(echo "$1" | tr '/' ' '); do
        grep -qw memory "$cur/cgroup.subtree_control" || echo +memory > "$cur/cgroup.subtree_control"
        cur=$cur/$part
        [ -d "$cur" ] || mkdir "$cur"
    done
}

# start_in CGROUP CMD...: runs CMD in the cgroup, in the background; prints its pid.
start_in() {
    local cg=$1; shift
    sh -c 'echo 0 > "$0/cgroup.procs" && exec "$@"' "$CG/$cg" "$@" > /dev/null 2>&1 &
    echo $!
}

# node_mib CGROUP NODE: the cgroup's anon + file MiB on NODE (memory.numa_stat).
node_mib() {
    awk -v n="N$2=" '$1 == "anon" || $1 == "file" {
        for (i = 2; i <= NF; i++) if (index($i, n) == 1) { sub(n, "", $i); s += $i } }
        END { printf "%d\n", s / 1048576 }' "$CG/$1/memory.numa_stat"
}

# usage_mib CGROUP: memory.current in MiB.
usage_mib() { echo $(( $(cat "$CG/$1/memory.current") / 1048576 )); }

# wait_usage CGROUP MIB TIMEOUT_S: waits until memory.current reaches MIB.
wait_usage() {
    local i=0
    while [ "$(usage_mib "$1")" -lt "$2" ]; do
        i=$((i + 1)); [ "$i" -gt "$(( $3 * 2 ))" ] && { echo "FAIL: $1 reached only $(usage_mib "$1") MiB of $2 in $3 s"; return 1; }
        sleep 0.5
    done
}

# wait_empty CGROUP TIMEOUT_S: waits until no task is left in CGROUP (killed
# tasks have exited and freed their memory); fails past TIMEOUT_S. Reads
# cgroup.procs: `test -s` is always false on cgroupfs (files of size 0).
wait_empty() {
    local i=0
    while grep -q . "$CG/$1/cgroup.procs"; do
        i=$((i + 1)); [ "$i" -gt "$(( $2 * 10 ))" ] && { echo "FAIL: tasks left in $1 $2 s after kill"; return 1; }
        sleep 0.1
    done
}

# wait_fast CGROUP MIB TIMEOUT_S: waits until CGROUP holds at least MIB on
# node 0, at most TIMEOUT_S seconds; the caller checks what it reached.
wait_fast() {
    local i=0
    until [ "$(node_mib "$1" 0)" -ge "$2" ]; do
        i=$((i + 1)); [ "$i" -gt "$3" ] && return 0
        sleep 1
    done
}

# on_lower CG MIB ARGS...: starts tierload ARGS in CG with its pages on node
# 1 (cpuset.mems = 1 until its usage reaches MIB and tierload has written
# its whole buffer, at most 90 s; the caller enables the cpuset controller on
# the way down), then lets it use both nodes. tierload's output goes to
# /tmp/on_lower.<last path component>.log.
on_lower() {
    local cg=$1 mib=$2; shift 2
    local log=/tmp/on_lower.${cg##*/}.log
    mkcg $cg
    echo 1 > $CG/$cg/cpuset.mems
    start_log $cg $log tierload "$@" > /dev/null
    wait_usage $cg $mib 90 || return 1
    wait_log $log 'touched in' 60 || return 1
    echo 0-1 > $CG/$cg/cpuset.mems
}

# start_tierd_tenants: runs tierd with a 1 s interval and one policy for
# tenants.slice/* (log in /tmp/tierd.log), sets TIERD to its pid and waits
# for /status.
start_tierd_tenants() {
    printf '[daemon]\ninterval = "1s"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
    tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
    TIERD=$!
    wait_http 30
}

# wait_http TIMEOUT_S: waits until tierd serves /status.
wait_http() {
    local i=0
    until tierctl status --json > /dev/null 2>&1; do
        i=$((i + 1)); [ "$i" -gt "$(( $1 * 5 ))" ] && { echo "FAIL: tierd did not serve /status in $1 s"; cat /tmp/tierd.log; return 1; }
        sleep 0.2
    done
}

# emit_status: one line `STATUS <json>` for the host-side test to parse.
emit_status() { echo "STATUS $(tierctl status --json)"; }

# emit_node CGROUP: one line `NODES <cgroup> <N0 MiB> <N1 MiB>`.
emit_node() { echo "NODES $1 $(node_mib "$1" 0) $(node_mib "$1" 1)"; }

# start_log CGROUP LOG CMD...: like start_in, with stdout (JSON reports) in LOG.
start_log() {
    local cg=$1 log=$2; shift 2
    sh -c 'echo 0 > "$0/cgroup.procs" && exec "$@"' "$CG/$cg" "$@" > "$log" 2>&1 &
    echo $!
}

# emit_report NAME LOG: one line `REPORT <name> <uptime s> <last JSON report>`.
emit_report() { echo "REPORT $1 $(cut -d' ' -f1 /proc/uptime) $(grep '^{' "$2" | tail -1)"; }

# damon_cat FILE: a DAMON sysfs file's value. Reading `state` takes DAMON's
# sysfs lock with mutex_trylock (mm/damon/sysfs.c) and fails with EBUSY
# while a kdamond fills its tried regions for tierd (an aggregation or two
# after tierd asks), so it retries for 10 s as tierd does.
damon_cat() {
    local i=0 v
    until v=$(cat "$1" 2>/dev/null); do
        i=$((i + 1)); [ $i -gt 100 ] && { cat "$1"; return 1; }
        sleep 0.1
    done
    echo "$v"
}

# kdamonds: one line `KDAMONDS <nr_kdamonds> <state of each>`.
kdamonds() {
    local d=/sys/kernel/mm/damon/admin/kdamonds n s=""
    n=$(damon_cat $d/nr_kdamonds)
    for k in $(seq 0 $((n - 1))); do s="$s $(damon_cat $d/$k/state)"; done
    echo "KDAMONDS $n$s"
}

# tierd_cycles: the full cycles tierd has run (its /status `cycles`; 0
# before the first).
tierd_cycles() {
    local c
    c=$(tierctl status --json 2>/dev/null | sed -n 's/.*"cycles":\([0-9]*\).*/\1/p')
    echo "${c:-0}"
}

# wait_cycles N: polls /status until tierd has run at least N cycles
# (60 s at most).
wait_cycles() {
    local i=0
    until [ "$(tierd_cycles)" -ge "$1" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && { echo "FAIL: fewer than $1 cycles in 60 s"; cat /tmp/tierd.log; return 1; }
        sleep 0.2
    done
}

# wait_status REGEX [TIMEOUT_S]: polls /status (JSON) until it matches
# REGEX (grep's basic syntax), TIMEOUT_S seconds at most (60).
wait_status() {
    local i=0
    until tierctl status --json 2>/dev/null | grep -q "$1"; do
        i=$((i + 1)); [ $i -gt $(( ${2:-60} * 5 )) ] && { echo "FAIL: /status did not match $1 in ${2:-60} s"; tierctl status --json; return 1; }
        sleep 0.2
    done
}

# next_cycle: waits until tierd has run one more full cycle than when called
# (60 s at most). Between full cycles in a quiet state (up to 4 intervals)
# tierd's metrics stand still: a check that a count stopped growing must see
# a full cycle between its two reads.
next_cycle() {
    local c i=0
    c=$(tierd_cycles)
    until [ "$(tierd_cycles)" -gt "$c" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && { echo "FAIL: no full cycle of tierd in 60 s"; return 1; }
        sleep 0.2
    done
}

# reports [LOG]: how many JSON reports tierload wrote to LOG (/tmp/a.log).
reports() { grep -c '^{' "${1:-/tmp/a.log}"; }

# hot_at_least R N [LOG]: the last report in LOG (/tmp/a.log), at least the
# N-th, has hot_residency >= R.
hot_at_least() {
    local log=${3:-/tmp/a.log}
    [ "$(reports "$log")" -ge "$2" ] || return 1
    grep '^{' "$log" | tail -1 | grep -o '"hot_residency":[0-9.e-]*' |
        awk -F: -v r="$1" '{ exit !($2 >= r) }'
}

# hot_set_on_node1: NUMA balancing off, then tenants.slice/a runs `tierload
# hotset` (192 MiB, 48 MiB hot, a JSON report a second in /tmp/a.log) with
# every page allocated on node 1 (cpuset.mems = 1 until it has them, then
# 0-1); prints its NODES line.
hot_set_on_node1() {
    echo 0 > /proc/sys/kernel/numa_balancing
    mkcg tenants.slice/a
    echo +cpuset > $CG/cgroup.subtree_control
    echo +cpuset > $CG/tenants.slice/cgroup.subtree_control
    echo 1 > $CG/tenants.slice/a/cpuset.mems
    start_log tenants.slice/a /tmp/a.log tierload hotset --size-mib 192 --hot-mib 48 --report-s 1 > /dev/null
    wait_usage tenants.slice/a 185 90 || exit 1
    # The usage mark comes while the last few MiB are still being written;
    # widening the cpuset then would put them on node 0.
    wait_log /tmp/a.log 'touched in' 60 || exit 1
    echo 0-1 > $CG/tenants.slice/a/cpuset.mems
    emit_node tenants.slice/a
}

# wait_log FILE TEXT TIMEOUT_S: waits until FILE contains TEXT; fails past
# TIMEOUT_S.
wait_log() {
    local i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ "$i" -gt "$(( $3 * 2 ))" ] && { echo "FAIL: no '$2' in $1 after $3 s"; return 1; }
        sleep 0.5
    done
}

# emit_goals: one `GOAL metric value nid path` line per DAMOS quota goal of
# every kdamond (per-memcg goals: Linux 6.19+).
emit_goals() {
    local g
    for g in /sys/kernel/mm/damon/admin/kdamonds/*/contexts/0/schemes/*/quotas/goals/[0-9]*; do
        [ -f "$g/target_metric" ] || continue
        echo "GOAL $(cat $g/target_metric) $(cat $g/target_value) $(cat $g/nid) $(cat $g/path 2>/dev/null)"
    done
}

# damon_stat_off: stops DAMON_STAT's exclusive kdamond where the kernel runs
# one (Linux 6.17+, on from boot on 7.x), as an operator does before tierd
# may use DAMON (tierd never stops kdamonds it did not create). Prints
# `DAMON_STAT was Y` when it did.
damon_stat_off() {
    local s=/sys/module/damon_stat/parameters/enabled
    if [ -f $s ] && [ "$(cat $s)" = Y ]; then
        echo N > $s && echo "DAMON_STAT was Y"
    fi
}
