#!/bin/sh
# Issue 29's targets of umpool-bench offload on the timed sim
# (sim_driver_costs:h200-timed, sim_time_scale:32: every driver call and
# copy waits what an H200 would charge, 32 times over, since this class of
# 2-core machine cannot copy at 54 GB/s):
#  - device->host (ump_evict) and host->device (ump_acquire) at least 0.80x
#    the model's pinned cuMemcpy at 64 MiB, and 0.90x at 1 GiB;
#  - every member of the oversubscribed loop family (the default --loop)
#    at most 1.15x its ideal (Belady's moves at the raw copy rates) and at
#    most 1.10x Belady's restores per round.
#
# The targets are the issue's, not loosened. The margin for a noisy machine
# is in the number of tries: a loaded machine only ever slows a run down
# (the baselines are paced to the model, never faster than it), which
# lowers a move's ratio and raises a loop's wall, so each check takes the
# best of up to 5 runs. Only what missed runs again: the moves of that size
# alone, or the loop members that missed, alone (--loop N:D:P,...), after a
# pause that grows with each try (5, 10, 15, 20 s): under a parallel
# `make check` the load comes from the other tests, which end meanwhile,
# where runs back to back all met the same load.
# Loop 6:4:1 was bimodal (1.24-1.27 of its ideal in most runs): no
# prefetch ever swapped, so each restore waited for the spill it needed
# (lib/tier/evict.c, pick's self and mark_queued; README, the loop family).
# It runs at 0.79-0.98 now.
# In a sanitizer build (UMPOOL_SANITIZED) the times are the
# instrumentation's, not the library's: only the restores are judged there
# (as test_hot_path.sh skips), every time still printed.
set -eu

bench=${UMPOOL_BENCH:-}
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
    echo "SKIP: UMPOOL_BENCH is unset or not executable"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 reads the bench's JSON"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_offload.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

scale=32
conf=sim_driver_costs:h200-timed,sim_time_scale:$scale
tries=5
timed=1
[ -n "${UMPOOL_SANITIZED:-}" ] && timed=0

# offload NAME ARGS...: one run, its JSON in $tmp/NAME.json.
offload() {
    name=$1
    shift
    rc=0
    "$bench" --json offload --dir "$tmp" --moves host --config "$conf" "$@" \
        >"$tmp/$name.json" 2>"$tmp/$name.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$tmp/$name.json" "$tmp/$name.err"
        fail "umpool-bench offload $* exited $rc"
    fi
}

# judge JSON MOVES_TARGET: prints each verdict, writes what missed to
# $tmp/missed ("moves" on a line of its own, the loop members that missed,
# comma-separated, on another); exits 2 when the output is not what this
# test expects at all. MOVES_TARGET 0: no moves to judge.
judge() {
    python3 - "$1" "$2" "$scale" "$timed" >"$tmp/verdicts" <<'EOF' || return $?
import json, sys
r = json.load(open(sys.argv[1]))
want, scale = float(sys.argv[2]), int(sys.argv[3])
timed = sys.argv[4] == "1"
try:
    assert r["backend"] == "sim" and r["baseline_paced_scale"] == scale, r
    missed, members = [], []
    if want:
        t = {x["direction"]: x for x in r["transfers"]}
        assert sorted(t) == ["device_to_host", "host_to_device"], t
        for d in ("device_to_host", "host_to_device"):
            x = t[d]
            assert x["baseline"] == "H200 copy" and x["baseline_gbs"] > 0, x
            ok = x["ratio"] >= want or not timed
            print("  %d MiB %-14s %.3f of the paced copy (target %.2f): %s" %
                  (r["size"] >> 20, d, x["ratio"], want,
                   ("ok" if timed else "not judged (sanitizer build)")
                   if ok else "below"))
            if not ok:
                missed.append("moves")
    targets = r["loop_targets"]
    assert targets == {"restores_ratio": 1.1, "ratio": 1.15}, targets
    for l in r["loops"]:
        assert l["restores_ok"] is not None and l["ok"] is not None, l
        assert l["restore_bytes"] > 0 and l["ideal_s"] > 0, l
        wall_ok = l["ok"] or not timed
        print("  loop %-7s restores %.2f a round, %.3f of Belady's %.2f; "
              "wall %.3f s, %.3f of the ideal %.3f s: %s" % (
                  l["spec"], l["restores_per_round"], l["restores_ratio"],
                  l["optimal_restores_per_round"], l["wall_s"], l["ratio"],
                  l["ideal_s"],
                  "above" if not (l["restores_ok"] and wall_ok)
                  else "ok" if timed
                  else "restores ok, wall not judged (sanitizer build)"))
        if not (l["restores_ok"] and wall_ok):
            members.append(l["spec"])
except (AssertionError, KeyError, TypeError) as e:
    print("unexpected JSON: %r" % (e,))
    sys.exit(2)
with open(sys.argv[1] + ".missed", "w") as f:
    f.write("%s\n%s\n" % ("moves" if missed else "", ",".join(members)))
EOF
}

t0=$(date +%s)

echo "check: 64 MiB moves (>= 0.80) and the loop family (<= 1.15x the ideal," \
    "<= 1.10x Belady's restores), best of $tries"
moves_ok=0
members=family
try=1
while [ "$try" -le "$tries" ]; do
    if [ "$moves_ok" -eq 0 ] && [ -n "$members" ]; then
        # the loops at the default size's budget (128 MiB: tensors of 16 and
        # 32 MiB), beside the 64 MiB moves
        offload run$try --size 64M --budget 128M --reps 3 --loop "$members"
    elif [ "$moves_ok" -eq 0 ]; then
        offload run$try --size 64M --reps 3 --loop none
    else
        offload run$try --size 4M --reps 1 --budget 128M --loop "$members"
    fi
    want=0.80
    [ "$moves_ok" -eq 1 ] && want=0
    rc=0
    judge "$tmp/run$try.json" "$want" || rc=$?
    cat "$tmp/verdicts"
    [ "$rc" -eq 0 ] || fail "run $try: $(cat "$tmp/run$try.json")"
    [ -n "$(sed -n 1p "$tmp/run$try.json.missed")" ] || moves_ok=1
    [ "$members" = none ] || members=$(sed -n 2p "$tmp/run$try.json.missed")
    [ -n "$members" ] || members=none
    if [ "$moves_ok" -eq 1 ] && [ "$members" = none ]; then
        break
    fi
    echo "  run $try missed: $(tr '\n' ' ' <"$tmp/run$try.json.missed")"
    [ "$try" -lt "$tries" ] && sleep $((try * 5))
    try=$((try + 1))
done
[ "$moves_ok" -eq 1 ] || fail "64 MiB moves below 0.80 of the paced copy in $tries runs"
[ "$members" = none ] || fail "loop members $members above a target in $tries runs"

echo "check: 1 GiB moves (>= 0.90), best of $tries"
try=1
while :; do
    offload big$try --size 1G --reps 3 --loop none
    rc=0
    judge "$tmp/big$try.json" 0.90 || rc=$?
    cat "$tmp/verdicts"
    [ "$rc" -eq 0 ] || fail "1 GiB run $try: $(cat "$tmp/big$try.json")"
    [ -n "$(sed -n 1p "$tmp/big$try.json.missed")" ] || break
    [ "$try" -lt "$tries" ] ||
        fail "1 GiB moves below 0.90 of the paced copy in $tries runs"
    sleep $((try * 5))
    try=$((try + 1))
done
echo "PASS ($(($(date +%s) - t0)) s)"
