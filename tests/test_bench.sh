#!/bin/sh
# Runs umpool-bench end to end: the narrated demo, a short alloc run in text
# and JSON, placement, a small offload run (with a stand-in fio too), coll
# on sim and on the fake CUDA driver, and usage errors. Timing numbers are not checked, only that
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

echo "check: offload with small sizes gives a row per move and per loop"
# The spill directory is $tmp: whatever engine the library can use there.
off="offload --size 8M --budget 8M --reps 1 --dir $tmp"
run offload $off
cat "$tmp/offload.out"
for d in 'device->host' 'host->device' 'host->NVMe' 'NVMe->host' \
    'device->NVMe' 'NVMe->device'; do
    grep -Eq "^$d +\| ump_" "$tmp/offload.out" || fail "no row for $d"
done
# The default family, the first member the loop of earlier versions; each
# row judged on both targets (scripts/gpu-check counts the "above"s).
for l in 12:4:2 6:4:1 16:3:1 8:2:3 12:3:0 24:8:1; do
    grep -Eq "^loop $l +\| .*(ok|above) .*\| .*(ok|above) *$" \
        "$tmp/offload.out" || fail "no verdicts for loop $l"
done
[ "$(grep -c '^loop [0-9]' "$tmp/offload.out")" -eq 6 ] ||
    fail "not one row per member of the family"
grep -Eq '^  targets: restores <= 1.10x .*wall <= 1.15x' "$tmp/offload.out" ||
    fail "no targets line"

echo "check: --json offload prints one valid JSON object"
run offload_json --json $off
if command -v python3 >/dev/null 2>&1; then
    python3 -m json.tool "$tmp/offload_json.out" >/dev/null ||
        fail "--json offload output is not valid JSON"
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
t = r["transfers"]
assert len(t) == 6, "%d transfers, not 6" % len(t)
assert all(x["ump_gbs"] > 0 for x in t), "a ump_gbs is not > 0"
loops = r["loops"]
assert [l["spec"] for l in loops] == ["12:4:2", "6:4:1", "16:3:1", "8:2:3",
                                      "12:3:0", "24:8:1"], loops
assert r["loop_targets"] == {"restores_ratio": 1.1, "ratio": 1.15}
for l in loops:
    n, d, p = map(int, l["spec"].split(":"))
    assert l["tensors"] == n and l["prefetch_depth"] == p, l
    assert l["device_tensors"] == d, l
    # more tensors than the device holds: every round moves both ways
    assert l["tensors"] * l["tensor_size"] > l["device_capacity"], l
    assert l["spill_bytes"] > 0 and l["restore_bytes"] > 0, l
    assert l["wall_s"] > 0 and l["rounds"] >= 3, l
    # the ideal comes from raw copies of one tensor, timed in the same run
    assert l["raw_d2h_gbs"] > 0 and l["raw_h2d_gbs"] > 0, l
    assert l["transfer_s"] > 0 and l["ideal_s"] >= l["transfer_s"], l
    # Belady: no policy beats the floor; the sustained optimum is at least
    # it; the verdicts follow the ratios
    assert 0 < l["floor_restores_per_round"] <= l["optimal_restores_per_round"]
    assert abs(l["restores_ratio"] - l["restores_per_round"] /
               l["optimal_restores_per_round"]) < 2e-3, l
    assert l["restores_ok"] == (l["restores_ratio"] <= 1.1), l
    # ratio (3 decimals) is wall_s / ideal_s (6 decimals) before their
    # rounding: within half a unit of each last decimal
    w, i, h = l["wall_s"], l["ideal_s"], 5e-7
    assert (w - h) / (i + h) - 5e-4 <= l["ratio"] <= (w + h) / (i - h) + 5e-4, l
    assert l["ok"] == (l["ratio"] <= 1.15), l
' "$tmp/offload_json.out" || fail "--json offload results are incomplete"
    echo "  valid JSON, 6 transfers, every loop moved data both ways"

    echo "check: --loop runs the members given, or none"
    run offload_one --json $off --loop 12:4:2,8:2:1
    run offload_none --json $off --loop none
    python3 -c '
import json, sys
one = json.load(open(sys.argv[1]))["loops"]
assert [l["spec"] for l in one] == ["12:4:2", "8:2:1"], one
assert json.load(open(sys.argv[2]))["loops"] == []
' "$tmp/offload_one.out" "$tmp/offload_none.out" ||
        fail "--loop: $(cat "$tmp/offload_one.out" "$tmp/offload_none.out")"

    echo "check: offload takes its NVMe baselines from fio when in PATH"
    # A stand-in for fio: the bandwidths it reports must come out as the
    # baselines, each direction from its own object.
    mkdir "$tmp/bin"
    cat >"$tmp/bin/fio" <<'FIO'
#!/bin/sh
rw=
n=0
for a; do
    case $a in
    --rw=*) rw=${a#--rw=} ;;
    --ioengine=io_uring | --direct=1 | --bs=1M | --iodepth=32 | \
        --output-format=json) n=$((n + 1)) ;;
    esac
done
[ "$n" -eq 5 ] || exit 1
case $rw in read | write) ;; *) exit 1 ;; esac
cat <<END
{ "fio version" : "fake", "jobs" : [ { "jobname" : "x",
  "job options" : { "rw" : "$rw" },
  "read" : { "io_bytes" : 1, "bw_bytes" : 1500000000, "bw" : 1464843 },
  "write" : { "io_bytes" : 1, "bw_bytes" : 2000000000, "bw" : 1953125 } } ] }
END
FIO
    chmod +x "$tmp/bin/fio"
    rc=0
    PATH="$tmp/bin:$PATH" "$bench" --json $off --loop none >"$tmp/fio.out" \
        2>"$tmp/fio.err" || rc=$?
    [ "$rc" -eq 0 ] || { cat "$tmp/fio.err"; fail "offload with fio: $rc"; }
    python3 -c '
import json, sys
t = {x["direction"]: x for x in json.load(open(sys.argv[1]))["transfers"]}
for d, gbs in (("host_to_nvme", 2.0), ("nvme_to_host", 1.5)):
    assert t[d]["baseline"] == "fio", "%s: baseline %s" % (d, t[d]["baseline"])
    assert abs(t[d]["baseline_gbs"] - gbs) < 1e-3, "%s: %s GB/s, not %s" % (
        d, t[d]["baseline_gbs"], gbs)
' "$tmp/fio.out" || fail "the NVMe baselines are not fio's numbers"
    echo "  fio's write and read bandwidths are the NVMe baselines"
else
    grep -q '"scenario": "offload"' "$tmp/offload_json.out" ||
        fail "no JSON object"
    echo "  python3 not found: checked the scenario key only"
fi

echo "check: offload on the timed sim compares with the model's pinned copy"
# sim_driver_costs:h200-timed: the device<->host baselines are memcpy paced
# to the H200 model's pinned cuMemcpy (lib/topo/drivercost.c), never faster
# than the model says; the moves' copies are paced to the same link. How
# close the moves come to the H200's own figures is the bench's to show
# (README: The sim's H200 model), not a test's: only bounds are checked.
run offload_timed --json offload --size 8M --budget 8M --reps 1 --dir "$tmp" \
    --loop none --config sim_driver_costs:h200-timed,sim_time_scale:16
if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["baseline_paced_scale"] == 16, r["baseline_paced_scale"]
model = r["baseline_model_gbs"]
# 8 MiB at 55.2 GB/s with 9 us of latency and sync, times 16
assert abs(model - 8388608 / (16 * (9000 + 8388608 / 55.2))) < 1e-3, model
t = {x["direction"]: x for x in r["transfers"]}
for d in ("device_to_host", "host_to_device"):
    x = t[d]
    assert x["baseline"] == "H200 copy", x
    assert 0 < x["baseline_gbs"] <= model * 1.01, (x, model)
    # a move copies over the same paced link, and does more: never above
    # the model (not checked against the one baseline of this run, which
    # a loaded machine can slow below the move: CI failed so)
    assert 0 < x["ump_gbs"] <= model * 1.01, (x, model)
' "$tmp/offload_timed.out" || fail "timed offload: $(cat "$tmp/offload_timed.out")"
    echo "  paced baselines and moves, never above the model's rate"
fi

echo "check: offload's options are checked"
for args in "offload --size 3M" "offload --size 5000K" "offload --reps 0" \
    "alloc --dir $tmp" "offload --loop 4:4:1" "offload --loop 4:2:4" \
    "offload --loop 4:2" "offload --loop 4:2:1," "offload --loop 1:0:0" \
    "offload --loop 65:2:1" "offload --loop all" \
    "offload --loop 4:2:1,4:2:1,4:2:1,4:2:1,4:2:1,4:2:1,4:2:1,4:2:1,4:2:1" \
    "resilience --loop 4:2:1"; do
    rc=0
    "$bench" $args >"$tmp/usage.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "umpool-bench $args exited $rc, not 2"
done
echo "  bad sizes, repetitions, loops and misplaced options exit 2"

echo "check: replay of the small training trace: no failure, footprint shown"
trace=${UMPOOL_TEST_DATA:-tests}/train-small.trace
run replay --config tcache:false replay "$trace" --capacity 3x,2G
cat "$tmp/replay.out"
[ "$(grep -c '^capacity .*ratio' "$tmp/replay.out")" -eq 2 ] ||
    fail "not one line per capacity"
grep -q 'failed allocations 0,' "$tmp/replay.out" || fail "allocations failed"
grep -q 'driver time 0.000 s' "$tmp/replay.out" &&
    fail "no modeled driver time (sim_driver_costs:h200)"
run replay_json --json replay "$trace" --capacity 3x
if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
r = o["runs"][0]
assert o["allocations"] > 100, o
assert r["failures"] == 0 and r["peak_reserved"] >= r["peak_live"], r
assert abs(r["ratio"] - r["peak_reserved"] / r["peak_live"]) < 1e-3, r
assert r["driver_s"] > 0 and r["alloc_us"]["p50"] <= r["alloc_us"]["p99"], r
' "$tmp/replay_json.out" || fail "replay JSON: $(cat "$tmp/replay_json.out")"
fi
printf 'a 1 100\nf 2\n' >"$tmp/bad.trace"
rc=0
"$bench" replay "$tmp/bad.trace" >"$tmp/usage.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a free of an unknown ID exited $rc, not 1"
grep -q 'bad.trace:2: ID 2 is not live' "$tmp/usage.out" ||
    fail "no line number: $(cat "$tmp/usage.out")"
for args in "replay" "replay $trace --capacity 0.1x" "alloc --capacity 1G"; do
    rc=0
    "$bench" $args >"$tmp/usage.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "umpool-bench $args exited $rc, not 2"
done
echo "  one line per capacity, JSON consistent, bad traces and options fail"

echo "check: coll prints nccl-tests' table, checked and modeled"
run coll --config backend:sim,sim_devices:3,sim_device_mem:256M coll \
    -b 8 -e 64K -f 8 -n 2
cat "$tmp/coll.out"
[ "$(grep -c ' oneshot \| twoshot \| ring \| tree ' "$tmp/coll.out")" -eq 5 ] ||
    fail "not one row per size (8 B to 64 KiB by 8) with an algorithm"
awk '$1 ~ /^[0-9]+$/ && $9 != 0 { exit 1 }' "$tmp/coll.out" ||
    fail "a row with wrong elements"
# The executed schedule's modeled time (column 12) is the plan's (11).
awk '$1 ~ /^[0-9]+$/ { d = $12 - $11; if (d < 0) d = -d;
                       if (d > 0.01 * $11 + 0.1) exit 1 }' "$tmp/coll.out" ||
    fail "a row whose executed modeled time is not the plan's"
# Beside each small size (up to 1 MiB), the floor it is measured against:
# one stream operation and its sync, a positive time; none above.
run coll_floor --config backend:sim,sim_devices:2,sim_device_mem:256M coll \
    -b 512K -e 2M -n 2
awk '$1 ~ /^[0-9]+$/ { n++; if ($1 <= 1048576 ? !($NF > 0) : $NF != "-")
                        exit 1 } END { exit n != 3 }' "$tmp/coll_floor.out" ||
    fail "coll: no floor beside a small size, or one beside a large one"
run coll_json --json --config backend:sim,sim_devices:2,sim_device_mem:256M \
    coll reduce_scatter -b 1K -e 4K -d bfloat16 -o max --algo ring
if command -v python3 >/dev/null 2>&1; then
    python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
assert o["collective"] == "reduce_scatter" and o["ranks"] == 2, o
r = o["results"]
assert [x["size"] for x in r] == [1024, 2048, 4096], r
assert all(x["algorithm"] == "ring" and x["wrong"] == 0 and
           x["type"] == "bfloat16" and x["redop"] == "max" and
           x["model_us"] > 0 and x["floor_us"] > 0 and
           abs(x["exec_us"] - x["model_us"]) <= 0.01 * x["model_us"]
           for x in r), r
' "$tmp/coll_json.out" || fail "coll JSON: $(cat "$tmp/coll_json.out")"
fi
# The cuda path (GPU-event timing, device copy baseline, buffers filled and
# read back through copies) on test_cuda's fake driver, found as
# libcuda.so.1 by the library and by the bench's own loader. Without cuda.h
# there is no fake driver: said, not failed.
fake=${UMPOOL_TEST_PLUGINS:-/nonexistent}/libfakecuda.so
if [ -f "$fake" ]; then
    echo "check: coll on the cuda backend (the fake driver), checked"
    mkdir "$tmp/cudalib"
    ln -s "$fake" "$tmp/cudalib/libcuda.so.1"
    for c in allgather allreduce; do
        rc=0
        LD_LIBRARY_PATH="$tmp/cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            UMPOOL_FAKE_CUDA=devices=1,mem=256 "$bench" --json \
            --config backend:cuda,cuda_virtual_devices:4 coll "$c" \
            -b 1K -e 64K -f 8 -n 2 >"$tmp/cuda_$c.out" \
            2>"$tmp/cuda_$c.err" || rc=$?
        if [ "$rc" -ne 0 ] && [ "$c" = allreduce ] &&
            grep -q 'built without nvcc' "$tmp/cuda_$c.err"; then
            echo "  allreduce: no kernel (built without nvcc)"
            continue
        fi
        [ "$rc" -eq 0 ] ||
            fail "coll $c on the fake driver: $(cat "$tmp/cuda_$c.err")"
        if command -v python3 >/dev/null 2>&1; then
            python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert [x["size"] for x in r] == [1024, 8192, 65536], r
assert all(x["wrong"] == 0 and x["exec_us"] == -1 and x["copy_us"] >= 0
           for x in r), r
' "$tmp/cuda_$c.out" || fail "coll $c JSON: $(cat "$tmp/cuda_$c.out")"
        fi
        echo "  $c: a row per size, nothing wrong"
    done
    # preload: the interposed pair beside ump_alloc+ump_free and the
    # driver's own, on the fake driver (found as libcuda.so.1).
    if [ -f "${UMPOOL_LIBDIR:-lib}/../preload/.libs/libumpool-preload.so" ]; then
        echo "check: preload on the fake driver"
        rc=0
        # (The preload's pool lives to the end of the process: under LSan,
        # the preload tests' suppressions say why its records stay.)
        LD_LIBRARY_PATH="$tmp/cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            LSAN_OPTIONS="suppressions=${UMPOOL_TEST_DATA:-.}/preload/lsan.supp:print_suppressions=0" \
            UMPOOL_FAKE_CUDA=devices=1,mem=256 UMPOOL_CONF=backend:cuda \
            "$bench" preload --iters 200 >"$tmp/preload.out" \
            2>"$tmp/preload.err" || rc=$?
        [ "$rc" -eq 0 ] ||
            fail "preload on the fake driver: $(cat "$tmp/preload.err")"
        rows=$(grep -c -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ ' \
            "$tmp/preload.out" || true)
        [ "$rows" -eq 8 ] || fail "preload: $rows rows: $(cat "$tmp/preload.out")"
        echo "  4 sizes of device and of pinned host memory, each with the" \
            "interposed, direct and driver pairs"
    fi
else
    echo "  (no fake CUDA driver in this build: the cuda path is not run)"
fi
echo "check: plugin: the PyTorch and CuPy entry points beside ump_alloc"
rc=0
"$bench" plugin --iters 2000 >"$tmp/plugin.out" 2>"$tmp/plugin.err" || rc=$?
[ "$rc" -eq 0 ] || fail "plugin exited $rc: $(cat "$tmp/plugin.err")"
rows=$(grep -c -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ ' "$tmp/plugin.out" || true)
[ "$rows" -eq 5 ] || fail "plugin: $rows rows: $(cat "$tmp/plugin.out")"
echo "  5 sizes, each with the direct, torch and cupy pairs"
for args in "coll nope" "coll -d nope" "coll -f 1" "coll -b 1M -e 1K" \
    "alloc --algo ring"; do
    rc=0
    "$bench" $args >"$tmp/usage.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "umpool-bench $args exited $rc, not 2"
done
echo "  a row per size, no wrong element, JSON consistent, bad options exit 2"

echo "check: ipc opens each size in a peer process, every byte right"
XDG_RUNTIME_DIR=$tmp "$bench" ipc --sizes 2M,6M --iters 3 >"$tmp/ipc.out" 2>&1 ||
    fail "ipc failed: $(cat "$tmp/ipc.out")"
# A row ends with its wrong bytes, then " (elsewhere)" where the maker's
# addresses were taken in the peer (a sanitizer's shadow memory, say).
rows=$(grep -c -E '^ +[0-9]+ MiB( +[0-9.]+){8} 0( \(elsewhere\))?$' \
    "$tmp/ipc.out" || true)
[ "$rows" -eq 2 ] || fail "ipc: $rows rows with no wrong byte: $(cat "$tmp/ipc.out")"
[ -z "$(ls -A "$tmp/umpool")" ] || fail "ipc left $(ls "$tmp/umpool") behind"
echo "  2 sizes, no wrong byte, nothing left in the socket directory"

echo "check: share attaches a peer and opens its allocations at its addresses"
XDG_RUNTIME_DIR=$tmp "$bench" share --sizes 2M,6M --iters 3 >"$tmp/share.out" 2>&1 ||
    fail "share failed: $(cat "$tmp/share.out")"
grep -q -E '^# attach_us [0-9.]+ .* create_us [0-9.]+ ' "$tmp/share.out" ||
    fail "share: no attach line: $(cat "$tmp/share.out")"
# size, chunks, 8 timings, no wrong byte, and never "(elsewhere)": the
# processes of a shared pool share their addresses.
rows=$(grep -c -E '^ +[0-9]+ MiB +[1-9][0-9]*( +[0-9.]+){8} 0$' \
    "$tmp/share.out" || true)
[ "$rows" -eq 2 ] || fail "share: $rows rows: $(cat "$tmp/share.out")"
# The allreduce between the two processes: 5 sizes through the shared
# pool (algorithm "shared") and between the processes, no wrong element.
rows=$(grep -c -E '^ +[0-9]+ [KM]?i?B +[0-9.]+ +shared +[0-9.]+ +[0-9.]+ 0$' \
    "$tmp/share.out" || true)
[ "$rows" -eq 5 ] ||
    fail "share: $rows allreduce rows: $(cat "$tmp/share.out")"
# A shared name keeps its lock file (every later sharer locks the same
# one); the socket itself is gone.
[ -z "$(ls -A "$tmp/umpool" | grep -v '\.lock$')" ] ||
    fail "share left $(ls "$tmp/umpool") behind"
echo "  2 sizes at the peer's addresses, no wrong byte, no socket left;" \
    "the allreduce at 5 sizes, shared, no wrong element"

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
