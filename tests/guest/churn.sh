# Churn soak, sourced after /tests/lib.sh: `churn_soak SECONDS [MIN]`: at
# least SECONDS and, when MIN is given, until MIN containers went through
# (to a deadline of 5 × SECONDS: a slow machine churns fewer a second).
#
# A steady 64 MiB tenant and tierd (DAMON heat, 500 ms cycles, a
# local_high that keeps it demoting), then containers created and destroyed
# one after another, each living ~1 s (its process killed mid-run, whatever
# tierd was doing with it). Prints, for the caller to check:
#   BASE rss_kib=.. hwm_kib=.. fds=.. series=..   after a 10 s warm-up churn
#   SOAK t=<s> rss_kib=.. hwm_kib=.. fds=.. series=..   every 60 s of the soak
#   CHURNED <1000 + containers churned in the soak>
#   END rss_kib=.. hwm_kib=.. fds=.. series=..    within a cycle of the last one leaving
#   ALIVE, LOOP_ERRORS <n>, EXIT <tierd's exit status>, KDAMONDS <n>
# Used by the VM test churn_soak_leaves_tierd_flat_and_no_series_behind
# (60 s and 25 containers) and by `cargo xtask bench` (10 min).

churn_soak() {
    local soak_s=$1 min=${2:-0}
    mkcg tenants.slice/steady
    start_in tenants.slice/steady tierload hotset --size-mib 64 --hot-mib 16 --report-s 60 > /dev/null
    wait_usage tenants.slice/steady 60 60
    printf '[daemon]\ninterval = "500ms"\n[hotness]\nsource = "damon"\n[[policy]]\nmatch = "tenants.slice/*"\nlocal_high = "50%%"\n' > /tmp/t.toml
    chmod 600 /tmp/t.toml
    tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
    T=$!
    wait_http 60
    sleep 1
    # Warm-up churn so allocator and DAMON pools reach their working size.
    churn_for 0 10
    echo "BASE $(tierd_usage)"
    churn_for 1000 "$soak_s" "$min"
    # Within a cycle of the last churned cgroup leaving its series are gone.
    local i=0
    until [ "$(tierctl metrics | grep -c 'cgroup="tenants.slice/churn')" = 0 ]; do
        i=$((i + 1)); [ $i -gt 20 ] && break
        sleep 0.2
    done
    echo "END $(tierd_usage)"
    kill -0 $T && echo "ALIVE"
    echo "LOOP_ERRORS $(tierctl metrics | awk '/^tierd_loop_errors_total/ {print $2}')"
    kill -TERM $T
    wait $T
    echo "EXIT $?"
    echo "KDAMONDS $(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)"
    grep -E 'panicked|ERROR' /tmp/tierd.log | head -5
}

# tierd's resident set (now and its peak), open fds, and metric series of
# churned cgroups.
tierd_usage() {
    echo "rss_kib=$(awk '/^VmRSS/ {print $2}' /proc/$T/status) hwm_kib=$(awk '/^VmHWM/ {print $2}' /proc/$T/status) fds=$(ls /proc/$T/fd | wc -l) series=$(tierctl metrics | grep -c 'cgroup="tenants.slice/churn')"
}

# churn_for FIRST SECONDS [MIN]: containers churnFIRST+1, ... for SECONDS,
# and on until MIN of them went through (at most 5 × SECONDS); a SOAK line
# every 60 s.
churn_for() {
    local n=$1 min=${3:-0} start end cap next now
    start=$(cut -d. -f1 /proc/uptime)
    end=$((start + $2))
    cap=$((start + 5 * $2))
    next=$((start + 60))
    while :; do
        now=$(cut -d. -f1 /proc/uptime)
        [ "$now" -ge "$end" ] && [ $((n - $1)) -ge "$min" ] && break
        [ "$now" -ge "$cap" ] && break
        n=$((n + 1))
        mkcg tenants.slice/churn$n
        P=$(start_in tenants.slice/churn$n tierload hotset --size-mib 24 --hot-mib 8 --report-s 60)
        sleep 1
        kill -KILL $P; wait $P 2>/dev/null
        while ! rmdir $CG/tenants.slice/churn$n 2>/dev/null; do sleep 0.1; done
        if [ "$(cut -d. -f1 /proc/uptime)" -ge "$next" ]; then
            echo "SOAK t=$((next - start)) $(tierd_usage)"
            next=$((next + 60))
        fi
    done
    echo "CHURNED $n"
}
