#!/bin/sh
# Runs umpool-bench end to end: the narrated demo, a short alloc run in text
# and JSON, and a usage error. Timing numbers are not checked, only that
# every scenario runs and says what it should.
set -eu

bench=${UMPOOL_BENCH:-}
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
    echo "SKIP: UMPOOL_BENCH is unset or not executable"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

# run NAME ARGS...: runs the bench with stdout to $tmp/NAME.out, stderr to
# $tmp/NAME.err; shows both and fails unless it exits 0.
run() {
    name=$1
    shift
    rc=0
    "$bench" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        cat "$tmp/$name.out" "$tmp/$name.err"
        fail "umpool-bench $* exited $rc"
    fi
}

echo "check: demo exits 0 and reports that stitching works"
run demo demo
cat "$tmp/demo.out"
grep -q '^Stitching works' "$tmp/demo.out" || fail "no stitching success line"

echo "check: alloc --iters 2000 --threads 2 exits 0 with a row per size"
run alloc alloc --iters 2000 --threads 2
cat "$tmp/alloc.out"
for size in '256 B' '64 KiB' '1 MiB' '64 MiB'; do
    # One latency row for 1 thread and one for 2 threads.
    for thr in 1 2; do
        grep -Eq "^ *$size +$thr \|" "$tmp/alloc.out" ||
            fail "no latency row for $size, $thr thread(s)"
    done
done

echo "check: --json alloc --iters 2000 prints one valid JSON object"
run json --json alloc --iters 2000
if command -v python3 >/dev/null 2>&1; then
    python3 -m json.tool "$tmp/json.out" >/dev/null ||
        fail "--json alloc output is not valid JSON"
    echo "  valid JSON"
    # 4 default sizes, 1 and 2 threads (the default), a ump median in each.
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert len(r) == 8, "%d results, not 8" % len(r)
assert all(x["ump"]["median_ns"] > 0 for x in r), "a ump median is not > 0"
' "$tmp/json.out" || fail "--json alloc results are incomplete"
    echo "  a result for each size and thread count"
else
    grep -q '"scenario": "alloc"' "$tmp/json.out" || fail "no JSON object"
    echo "  python3 not found: checked the scenario key only"
fi

echo "check: placement gives a row per machine and policy"
"$bench" placement >"$tmp/place.out" || fail "placement exited non-zero"
for t in dgx-h200 pcie-4gpu nvlink-pairs-4gpu; do
    for p in local interleave balanced domain; do
        grep -Eq "^$t +$p +\|" "$tmp/place.out" || fail "no row for $t $p"
    done
done
if command -v python3 >/dev/null 2>&1; then
    "$bench" --json placement >"$tmp/place.json" || fail "--json placement"
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert len(r) == 12, "%d results, not 12" % len(r)
for x in r:
    # the workload is the same for every policy: 12 GiB + 2 x 256 MiB +
    # 3 x 512 MiB per device
    n = len(x["gib_per_device"])
    want = 12 + 0.5 + 1.5 * n
    got = sum(x["gib_per_device"])
    assert abs(got - want) < 0.01, "%s/%s: %.2f GiB, not %.2f" % (
        x["topology"], x["policy"], got, want)
    assert x["enomem"] == 0
' "$tmp/place.json" || fail "--json placement results are wrong"
fi
echo "  12 rows, each holding the whole workload"

echo "check: an unknown scenario exits 2 with a usage message"
rc=0
"$bench" no-such-scenario >"$tmp/usage.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "unknown scenario exited $rc, not 2"
grep -q 'usage:' "$tmp/usage.out" || fail "no usage message"

echo "check: an unknown option exits 2"
rc=0
"$bench" alloc --no-such-option >"$tmp/usage.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "unknown option exited $rc, not 2"

echo "PASS"
