#!/bin/sh
# contrib/grafana/umpool.json and contrib/prometheus.yml: the dashboard
# passes tests/inspect/check_dashboard.py (its layout, metric names known to
# the exporter, counters only under rate(), every expr's PromQL accepted by
# promtool check rules); promtool check config accepts the Prometheus
# configuration; and the checker has teeth: broken copies of the dashboard
# (an unknown metric, a counter without rate(), bad PromQL, overlapping
# panels, ...) each fail it, naming the problem. Needs no build. SKIP
# without python3 or promtool: CI installs both (scripts/install-deps).
set -eu

top=${srcdir:-$(dirname "$0")/..}
dash=$top/contrib/grafana/umpool.json
conf=$top/contrib/prometheus.yml
checker=$top/tests/inspect/check_dashboard.py
promtool=${PROMTOOL:-promtool}
for tool in python3 "$promtool"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool is not installed (scripts/install-deps installs it)"
        exit 77
    fi
done
for f in "$dash" "$conf" "$checker"; do
    [ -f "$f" ] || { echo "FAIL: no $f (srcdir=$top)"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_dashboard.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

echo "check: the dashboard passes check_dashboard.py --promtool"
python3 "$checker" "$dash" --promtool "$promtool" || fail "check_dashboard.py"

echo "check: --print-exprs prints one 'title<TAB>expr' line per target"
python3 "$checker" "$dash" --print-exprs >"$tmp/exprs" 2>"$tmp/exprs.err" ||
    { cat "$tmp/exprs.err"; fail "check_dashboard.py --print-exprs"; }
want=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(sum(len(p.get("targets", [])) for p in d["panels"]))' "$dash")
got=$(wc -l <"$tmp/exprs")
[ "$got" -eq "$want" ] || fail "--print-exprs printed $got lines, want $want"
if grep -v "	" "$tmp/exprs" | grep -q .; then
    fail "--print-exprs: a line without a tab"
fi
if grep -q '\$' "$tmp/exprs"; then
    fail "--print-exprs: a variable left unsubstituted"
fi

echo "check: promtool check config contrib/prometheus.yml"
"$promtool" check config "$conf" >"$tmp/config.out" 2>&1 ||
    { cat "$tmp/config.out"; fail "promtool check config"; }

# Broken copies of the dashboard: NAME<TAB>what the checker must say.
python3 - "$dash" "$tmp" >"$tmp/mutations" <<'EOF'
import copy, json, sys
src, out = sys.argv[1], sys.argv[2]
base = json.load(open(src))
panels = [p for p in base["panels"] if p.get("type") != "row"]


def first(d, needle):
    """The first panel of d (not a row) with an expr containing needle."""
    for p in d["panels"]:
        for t in p.get("targets", []):
            if needle in t.get("expr", ""):
                return p, t
    raise SystemExit("no expr contains " + needle)


def mutation(name, want):
    def deco(fn):
        d = copy.deepcopy(base)
        fn(d)
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(d, f)
        print(f"{name}\t{want}")
    return deco


@mutation("unknown_metric", "unknown metric umpool_live_byte")
def _(d):
    p, t = first(d, "umpool_live_bytes")
    t["expr"] = t["expr"].replace("umpool_live_bytes", "umpool_live_byte")


@mutation("counter_without_rate", "counter umpool_spills_total is used")
def _(d):
    p, t = first(d, "umpool_spills_total")
    t["expr"] = 'sum(umpool_spills_total{pid=~"$pid"})'


@mutation("bad_promql", "promtool rejects the expr")
def _(d):
    p, t = first(d, "umpool_capacity_bytes")
    t["expr"] = 'umpool_live_bytes{pid=~"$pid"} / / umpool_capacity_bytes'


@mutation("unbalanced", "unbalanced")
def _(d):
    p, t = first(d, "rate(")
    t["expr"] = t["expr"].rstrip(")")


@mutation("overlap", "overlaps")
def _(d):
    a = [p for p in d["panels"] if p.get("type") != "row"]
    a[1]["gridPos"] = dict(a[0]["gridPos"])


@mutation("too_wide", "over the grid's 24 columns")
def _(d):
    a = [p for p in d["panels"] if p.get("type") != "row"]
    a[-1]["gridPos"]["x"] = 24 - a[-1]["gridPos"]["w"] + 1


@mutation("duplicate_id", "is also the id of")
def _(d):
    a = [p for p in d["panels"] if p.get("type") != "row"]
    a[1]["id"] = a[0]["id"]


@mutation("fixed_range", "over a fixed range [5m]")
def _(d):
    p, t = first(d, "$__rate_interval")
    t["expr"] = t["expr"].replace("$__rate_interval", "5m")


@mutation("fixed_datasource", "is not the dashboard's datasource variable")
def _(d):
    p, t = first(d, "umpool_")
    t["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}


@mutation("unknown_variable", "uses $job, which is no variable")
def _(d):
    p, t = first(d, 'pid=~"$pid"')
    t["expr"] = t["expr"].replace('pid=~"$pid"', 'pid=~"$pid",job="$job"')


@mutation("empty_expr", "empty expr")
def _(d):
    p, t = first(d, "umpool_")
    t["expr"] = " "


@mutation("no_grid", "gridPos.h is")
def _(d):
    del d["panels"][3]["gridPos"]["h"]


@mutation("unknown_in_variable", "variable $pid: unknown metric")
def _(d):
    for v in d["templating"]["list"]:
        if v["name"] == "pid":
            v["query"] = v["definition"] = "label_values(umpool_pools, pid)"
EOF
n=0
while IFS='	' read -r name want; do
    rc=0
    python3 "$checker" "$tmp/$name.json" --promtool "$promtool" \
        >"$tmp/$name.out" 2>&1 || rc=$?
    if [ "$rc" -ne 1 ]; then
        cat "$tmp/$name.out"
        fail "mutation $name: the checker exited $rc, expected 1"
    fi
    if ! grep -qF -- "$want" "$tmp/$name.out"; then
        cat "$tmp/$name.out"
        fail "mutation $name: the checker did not say '$want'"
    fi
    echo "mutation $name: caught ($(grep -m1 -F -- "$want" "$tmp/$name.out"))"
    n=$((n + 1))
done <"$tmp/mutations"
[ "$n" -ge 13 ] || fail "only $n mutations ran"
printf 'not json' >"$tmp/garbage.json"
rc=0
python3 "$checker" "$tmp/garbage.json" >"$tmp/garbage.out" 2>&1 || rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "does not load" "$tmp/garbage.out"; then
    cat "$tmp/garbage.out"
    fail "a file that is no JSON passed"
fi
echo "dashboard: $(python3 "$checker" "$dash" 2>&1 | sed 's/^.*: OK: //'); $n broken copies caught"
