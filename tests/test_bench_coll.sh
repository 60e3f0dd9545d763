#!/bin/sh
# Issue 30's sim target for large collectives: umpool-bench coll allreduce
# of 4 ranks x 64 MiB (float32, two-shot) at least 0.7 of the memory-copy
# baseline the bench runs beside it (every rank's memcpy of the bytes it
# must at least read and write, all at once). Before the reduction
# streamed its stores (lib/coll/reduce.c) it ran at 0.54-0.59 here.
#
# A noisy 2-core machine (other tests beside this one under make -j) moves
# both sides, not always together: single runs range 0.47-1.07 here (the
# median of ten 0.67, against 0.54 before). The check takes the median of
# seven runs, up to three rounds, and says when it stays below 0.5 (a
# return to the slow schedules: 0.38 for the pulling all-gather), but does
# not fail on speed: this machine's noise does not let a gate hold without
# false failures. It fails on wrong elements.
set -eu

bench=${UMPOOL_BENCH:-}
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
    echo "SKIP: UMPOOL_BENCH is unset or not executable"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_coll.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# A round: seven runs, their median. A round below 0.5 is run again, up to
# three rounds (another test hogging a core for a while slows the four
# ranks' threads more than the one memcpy): the guard fails only when three
# rounds in a row are below it.
round() {
    for run in 1 2 3 4 5 6 7; do
        "$bench" --config backend:sim,sim_devices:4,sim_device_mem:1G coll \
            allreduce -b 64M -e 64M -n 5 >"$tmp/r$run.out" \
            2>"$tmp/r$run.err" ||
            { cat "$tmp/r$run.out" "$tmp/r$run.err"; echo "FAIL: bench"
              exit 1; }
    done
    # copy/time is column 15 of the row (tools/bench/coll.c), #wrong 9
    cat "$tmp"/r*.out | awk '$1 == 67108864 { print $15, $9 }' |
        sort -n >"$tmp/ratios"
    awk '{ printf "  copy/allreduce %s\n", $1; if ($2 != 0) bad = 1 }
         END { exit bad }' "$tmp/ratios" ||
        { echo "FAIL: wrong elements"; exit 1; }
    [ "$(wc -l <"$tmp/ratios")" -eq 7 ] || { echo "FAIL: not 7 rows"; exit 1; }
    median=$(sed -n 4p "$tmp/ratios" | cut -d' ' -f1)
    echo "  median $median (target 0.7, guard 0.5)"
}

for try in 1 2 3; do
    echo "check: allreduce 4 x 64 MiB on sim against memcpy, median of 7" \
        "(round $try of at most 3)"
    round
    awk -v m="$median" 'BEGIN { exit !(m < 0.5) }' || { echo "PASS"; exit 0; }
done
# Below the guard three rounds in a row: reported, not failed. Under
# make -j2 on 2 cores the four ranks' threads lose to whatever runs beside
# them (medians 0.43-0.49 seen while the rest of the suite ran, 0.70 alone):
# the speed is umpool-bench's to measure, not a timed test's (README,
# Standards). The results' exactness above still fails the test.
echo "  below 0.5 of the copy in 3 rounds: reported, not failed (load)"
echo "PASS"
