#!/bin/sh
# Issue 29's replay target on the timed sim (sim_driver_costs:h200-timed):
# umpool-bench replay of a training run's allocation trace
# (scripts/gen-train-trace, the default 1.3B model with sequence lengths
# that change every step) on a 141 GiB device, the pool's wall time against
# the model of PyTorch's expandable segments the bench runs beside it on the
# same trace, same driver table, same waits (tools/bench/replay_es.c).
#
# Targets: the pool's wall under the model's (the H200 figure is 0.26 s for
# PyTorch and 0.38 s for the pool on the hidden trace); its footprint (peak
# reserved / peak live) within 1.02 and below the model's. A noisy 2-core
# machine only ever slows a run down (and the pool's own bookkeeping, which
# runs between its fewer driver calls, more than the model's), so the check
# sets the fastest of five runs of each side against each other and allows
# 0.9 (about 0.6 on a quiet machine). With carve:false (every allocation
# owns whole chunks) the footprint must stay within 1.002: that is the
# configuration for a footprint first, at more driver time.
set -eu

bench=${UMPOOL_BENCH:-}
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
    echo "SKIP: UMPOOL_BENCH is unset or not executable"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 writes the trace and reads the bench's JSON"
    exit 77
fi
gen=${UMPOOL_TEST_DATA:-tests}/../scripts/gen-train-trace

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_bench_replay.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

python3 "$gen" -o "$tmp/train.trace" 2>"$tmp/gen.err" ||
    { cat "$tmp/gen.err"; fail "gen-train-trace"; }

echo "check: replay on the timed sim, the pool's wall under PyTorch's" \
    "expandable segments (model), fastest of 5 each"
for run in 1 2 3 4 5; do
    "$bench" --json --config sim_driver_costs:h200-timed replay \
        "$tmp/train.trace" --capacity 141G >"$tmp/r$run.json" \
        2>"$tmp/r$run.err" ||
        { cat "$tmp/r$run.err"; fail "umpool-bench replay exited non-zero"; }
done
python3 - "$tmp"/r[1-5].json <<'EOF' ||
import json, os, sys
ump, es = [], []
for path in sys.argv[1:]:
    r = json.load(open(path))["runs"][0]
    e = r["torch_es"]
    assert r["failures"] == 0 and e["failures"] == 0, r
    assert r["time_scale"] == 1, r
    # the footprint: within 1.02 of the live bytes, below the model's
    assert 1.0 <= r["ratio"] <= 1.02, r
    assert r["ratio"] < e["ratio"], r
    ump.append(r["wall_s"])
    es.append(e["wall_s"])
    print("  ump wall %.3f s, driver %.3f s, reserved/live %.4f; PyTorch ES "
          "(model) wall %.3f s, driver %.3f s, %.4f" % (
              r["wall_s"], r["driver_s"], r["ratio"], e["wall_s"],
              e["driver_s"], e["ratio"]))
ratio = min(ump) / min(es)
print("  fastest: ump %.3f s, model %.3f s: %.2f (at most 0.9)" % (
    min(ump), min(es), ratio))
if ratio > 0.9 and os.environ.get("UMPOOL_SANITIZED"):
    print("  (a sanitizer build: reported, not failed)")
    sys.exit(0)
sys.exit(0 if ratio <= 0.9 else 3)
EOF
    fail "the pool's replay is not under the model's (or a field is wrong)"

echo "check: carve:false keeps the footprint first"
"$bench" --json --config sim_driver_costs:h200,carve:false replay \
    "$tmp/train.trace" --capacity 141G >"$tmp/whole.json" 2>"$tmp/whole.err" ||
    { cat "$tmp/whole.err"; fail "umpool-bench replay carve:false"; }
python3 - "$tmp/whole.json" <<'EOF' || fail "carve:false footprint"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print("  carve:false: reserved/live %.4f, driver %.3f s" % (r["ratio"],
                                                          r["driver_s"]))
assert r["failures"] == 0 and 1.0 <= r["ratio"] <= 1.002, r
EOF
echo "PASS"
