#!/bin/sh
# Issue 29's targets of the cold path and the replay, on the timed sim
# (sim_driver_costs:h200-timed): umpool-bench alloc's first allocation after
# ump_trim against the modeled raw create + map + set access of the same
# size, and umpool-bench replay's model of PyTorch's expandable segments
# next to the pool on the small training trace.
#
# The cold ratio's target is 1.2; a noisy 2-core machine only ever slows a
# run down, so the check takes the best of three runs and allows 1.3. The
# pool's modeled driver time of each cold allocation must be exactly the raw
# sequence's (a structural property: no timing in it).
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

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_cold.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

conf=backend:sim,sim_devices:1,sim_device_mem:4G
conf=$conf,sim_driver_costs:h200-timed,sim_time_scale:4

echo "check: cold allocations within 1.2x (1.3 allowed) of the modeled raw" \
    "sequence, best of 3"
ok=0
for try in 1 2 3; do
    "$bench" --json alloc --config "$conf" --sizes 256,64K,1M,64M,1G \
        --iters 2000 --threads 1 >"$tmp/cold.json" 2>"$tmp/cold.err" ||
        { cat "$tmp/cold.err"; fail "umpool-bench alloc exited non-zero"; }
    rc=0
    python3 - "$tmp/cold.json" <<'EOF' || rc=$?
import json, sys
c = json.load(open(sys.argv[1]))["cold"]
assert c["raw_vmm"]["available"] and c["raw_vmm"]["modeled"] == "h200-timed", c
worst = 0
for r in c["results"]:
    assert r["raw_vmm_median_ns"] > 0, r
    # exactly the raw sequence's driver calls: the same modeled time
    assert abs(r["ump_driver_over_model"] - 1) < 1e-3, r
    worst = max(worst, r["ump_over_raw_vmm"])
    print("  %10d B: ump %.1f us, raw %.1f us, %.3g" % (
        r["size"], r["ump_median_ns"] / 1e3, r["raw_vmm_median_ns"] / 1e3,
        r["ump_over_raw_vmm"]))
sys.exit(0 if worst <= 1.3 else 3)
EOF
    case $rc in
    0) ok=1; break ;;
    3) echo "  run $try: above 1.3" ;;
    *) fail "cold JSON: $(cat "$tmp/cold.json")" ;;
    esac
done
[ "$ok" -eq 1 ] || fail "cold allocations above 1.3x the raw sequence in 3 runs"

echo "check: replay shows PyTorch's expandable segments (model) beside the pool"
trace=${UMPOOL_TEST_DATA:-tests}/train-small.trace
"$bench" --json --config sim_driver_costs:h200-timed replay "$trace" \
    --capacity 3x >"$tmp/replay.json" 2>"$tmp/replay.err" ||
    { cat "$tmp/replay.err"; fail "umpool-bench replay exited non-zero"; }
python3 - "$tmp/replay.json" <<'EOF' || fail "replay JSON: $(cat "$tmp/replay.json")"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
e = r["torch_es"]
assert r["time_scale"] == 1, r
assert e["failures"] == 0 and e["peak_reserved"] >= r["peak_live"], e
assert e["pages"] == e["calls"]["create"] == e["calls"]["map"], e
assert e["calls"]["access_handles"] == e["pages"], e
assert e["calls"]["unmap"] == 0, e  # nothing released on a roomy device
assert e["driver_s"] > 0 and e["wall_s"] >= e["driver_s"] * 0.9, e
print("  ump wall %.3f s, driver %.3f s, ratio %.4f; PyTorch (model) wall "
      "%.3f s, driver %.3f s, ratio %.4f" % (
          r["wall_s"], r["driver_s"], r["ratio"], e["wall_s"], e["driver_s"],
          e["ratio"]))
EOF
echo "PASS"
