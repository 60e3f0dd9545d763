#!/usr/bin/env python3
"""Checks a Grafana dashboard of umpool metrics (contrib/grafana/umpool.json).

    check_dashboard.py DASHBOARD.json [--metrics FILE] [--promtool PATH]
                       [--print-exprs]

What it checks, naming the panel of each problem:
  - the JSON loads and has title, uid, schemaVersion and panels;
  - panel ids and titles are unique (rows' titles excepted); every panel
    has a type, a title, a description
    and a gridPos of integers x, y, w, h with x + w <= 24; no two panels
    overlap in the grid;
  - every panel but a row has targets, each with a non-empty expr, a unique
    refId and the dashboard's datasource variable as its datasource;
  - every metric an expr or a variable's query names (umpool_...) is known:
    the names of the # HELP / # TYPE lines of --metrics FILE (a Prometheus
    text page, e.g. what umpool-inspect serve answers), or else the
    exporter's names listed below;
  - counters (names ending in _total, and those --metrics types counter)
    appear only inside rate(), irate() or increase(), whose range is a
    Grafana variable such as $__rate_interval, not a fixed duration;
  - every $variable an expr uses is the dashboard's or Grafana's own;
  - with --promtool PATH: each expr, its variables substituted
    ($__rate_interval -> 1m, other variables -> .*), becomes a recording
    rule of a temporary rules file, and `promtool check rules` must accept
    it (PromQL syntax).
--print-exprs prints each substituted expr on stdout, one a line, as
"panel title<TAB>expr", for a test that queries them against a Prometheus.
Messages go to stderr. Exit status: 0 when every check passes, 1 when one
fails, 2 on bad usage. Python 3 standard library only.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# What umpool-inspect serve exports (tools/inspect), used without --metrics.
BUILTIN_GAUGES = """
umpool_capacity_bytes umpool_live_bytes umpool_reserved_bytes
umpool_cached_bytes umpool_mapped_bytes umpool_peak_bytes
umpool_fragmentation_ratio umpool_tier_used_bytes umpool_tier_capacity_bytes
umpool_offloaded_bytes umpool_device_failed umpool_lost_bytes
umpool_lost_allocations umpool_link_bandwidth_bytes_per_second
umpool_gpu_utilization_ratio umpool_gpu_memory_utilization_ratio
umpool_gpu_temperature_celsius umpool_exporter_up
umpool_exporter_scrape_seconds umpool_pool_info umpool_device_info
""".split()
BUILTIN_COUNTERS = """
umpool_spilled_bytes_total umpool_restored_bytes_total umpool_spills_total
umpool_restores_total umpool_evictions_total umpool_driver_seconds_total
umpool_link_bytes_total umpool_collective_calls_total
umpool_collective_bytes_total umpool_collective_timed_calls_total
umpool_collective_timed_bus_bytes_total
umpool_collective_timed_seconds_total
""".split()

RATE_FUNCS = {"rate", "irate", "increase"}
GRID_WIDTH = 24
# Grafana's own variables, and what stands for them in a checked expr.
GRAFANA_VARS = {
    "__rate_interval": "1m", "__interval": "1m", "__interval_ms": "60000",
    "__range": "1h", "__range_s": "3600", "__range_ms": "3600000",
    "__from": "0", "__to": "3600000",
}
# $name, ${name}, ${name:format}, [[name]], [[name:format]]
VAR_RE = re.compile(
    r"\$(\w+)|\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]")
IDENT_RE = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
METRIC_RE = re.compile(r"umpool_[a-z0-9_]+")


class Checker:
    def __init__(self):
        self.errors = []

    def error(self, where, msg):
        self.errors.append(f"{where}: {msg}")


def load_metrics_file(path):
    """Names of the # HELP / # TYPE lines, and those typed counter."""
    known, counters = set(), set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "#" and parts[1] in (
                    "HELP", "TYPE"):
                name = parts[2]
                known.add(name)
                if parts[1] == "TYPE" and len(parts) >= 4:
                    kind = parts[3]
                    if kind == "counter":
                        counters.add(name)
                    elif kind in ("histogram", "summary"):
                        known.update({name + "_sum", name + "_count"})
                        counters.update({name + "_sum", name + "_count"})
                        if kind == "histogram":
                            known.add(name + "_bucket")
                            counters.add(name + "_bucket")
    return known, counters


def scan_expr(expr):
    """Walks a PromQL expression: yields (kind, value, context) with kind
    'ident' (an identifier outside strings and braces; context: the
    innermost enclosing call's name or None), 'range' (the text of a [...]
    selector; context as for ident) or 'unbalanced'."""
    stack = []          # one entry per open '(': the call's name or None
    last_ident = None   # the identifier just before, if nothing else since
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < n and expr[j] != c:
                j += 2 if (expr[j] == "\\" and c != "`") else 1
            i = j + 1
            last_ident = None
            continue
        if c == "#":  # a comment, to the end of the line
            while i < n and expr[i] != "\n":
                i += 1
            continue
        if c == "{":  # label matchers: names here are labels
            j = i + 1
            while j < n and expr[j] != "}":
                if expr[j] in "\"'`":
                    q = expr[j]
                    j += 1
                    while j < n and expr[j] != q:
                        j += 2 if (expr[j] == "\\" and q != "`") else 1
                j += 1
            i = j + 1
            continue  # a selector's braces keep last_ident: name{...}(
        if c == "[":
            j = expr.find("]", i)
            if j < 0:
                yield ("unbalanced", "[", None)
                return
            yield ("range", expr[i + 1:j], stack[-1] if stack else None)
            i = j + 1
            last_ident = None
            continue
        if c == "(":
            stack.append(last_ident.lower() if last_ident else None)
            last_ident = None
            i += 1
            continue
        if c == ")":
            if not stack:
                yield ("unbalanced", ")", None)
                return
            stack.pop()
            last_ident = None
            i += 1
            continue
        if c == "$":  # a Grafana variable stays one token
            m = VAR_RE.match(expr, i)
            i = m.end() if m else i + 1
            last_ident = None
            continue
        m = IDENT_RE.match(expr, i)
        if m and not (i > 0 and (expr[i - 1].isalnum() or expr[i - 1] in "._")):
            tok = m.group(0)
            yield ("ident", tok, stack[-1] if stack else None)
            last_ident = tok
            i = m.end()
            continue
        if m:  # the tail of a number such as 1e3 or 0x1f
            i = m.end()
            continue
        if not c.isspace():
            last_ident = None
        i += 1
    if stack:
        yield ("unbalanced", "(", None)


def variables_used(text):
    for m in VAR_RE.finditer(text):
        yield m.group(1) or m.group(2) or m.group(3)


def substitute(text, values):
    """The expr with each variable replaced by values[name] (or .*)."""
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, ".*")
    return VAR_RE.sub(repl, text)


def check_metric_names(ck, where, text, known):
    for m in IDENT_RE.finditer(text):
        tok = m.group(0)
        start = m.start()
        if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_$"):
            continue
        if not tok.startswith("umpool_"):
            continue
        if not METRIC_RE.fullmatch(tok):
            ck.error(where, f"metric name {tok!r} is not a valid umpool name")
        elif tok not in known:
            ck.error(where, f"unknown metric {tok}")


def check_expr(ck, where, expr, known, counters, var_names):
    check_metric_names(ck, where, expr, known)
    for kind, value, ctx in scan_expr(expr):
        if kind == "unbalanced":
            ck.error(where, f"unbalanced {value!r} in the expression")
        elif kind == "ident" and value in counters and ctx not in RATE_FUNCS:
            inside = f"inside {ctx}()" if ctx else "outside any call"
            ck.error(where, f"counter {value} is used {inside}: a counter "
                     "goes inside rate(), irate() or increase()")
        elif kind == "range" and ctx in RATE_FUNCS:
            rng = value.split(":")[0].strip()
            if not rng.startswith("$") and not rng.startswith("[["):
                ck.error(where, f"{ctx}() over a fixed range [{value}]: use "
                         "[$__rate_interval] so that it follows the scrape "
                         "interval")
    for name in variables_used(expr):
        if name not in var_names and name not in GRAFANA_VARS:
            ck.error(where, f"expr uses ${name}, which is no variable of the "
                     "dashboard")


def grid_of(ck, where, panel):
    gp = panel.get("gridPos")
    if not isinstance(gp, dict):
        ck.error(where, "no gridPos")
        return None
    vals = {}
    for k in ("x", "y", "w", "h"):
        v = gp.get(k)
        if not isinstance(v, int) or isinstance(v, bool):
            ck.error(where, f"gridPos.{k} is {v!r}, not an integer")
            return None
        vals[k] = v
    if vals["x"] < 0 or vals["y"] < 0 or vals["w"] < 1 or vals["h"] < 1:
        ck.error(where, f"gridPos {vals} has a negative position or an "
                 "empty size")
        return None
    if vals["x"] + vals["w"] > GRID_WIDTH:
        ck.error(where, f"gridPos x + w = {vals['x'] + vals['w']} is over "
                 f"the grid's {GRID_WIDTH} columns")
    return vals


def check_overlaps(ck, placed):
    for i in range(len(placed)):
        wa, a = placed[i]
        for j in range(i + 1, len(placed)):
            wb, b = placed[j]
            if (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and
                    a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]):
                ck.error(wa, f"overlaps {wb} in the grid ({a} and {b})")


def datasource_vars(dash):
    out = set()
    for v in dash.get("templating", {}).get("list", []) or []:
        if isinstance(v, dict) and v.get("type") == "datasource":
            out.add(v.get("name"))
    return out


def check_datasource(ck, where, ds, ds_vars):
    if not isinstance(ds, dict):
        ck.error(where, f"datasource {ds!r} is not the dashboard's "
                 "datasource variable ({\"type\": \"prometheus\", \"uid\": "
                 "\"${datasource}\"})")
        return
    uid = ds.get("uid")
    m = VAR_RE.fullmatch(uid) if isinstance(uid, str) else None
    name = m and (m.group(1) or m.group(2) or m.group(3))
    if ds.get("type") != "prometheus" or name not in ds_vars:
        ck.error(where, f"datasource {ds} is not the dashboard's datasource "
                 "variable: a fixed uid breaks the import elsewhere")


def check_panels(ck, panels, known, counters, var_names, ds_vars, ids,
                 titles, exprs, context=""):
    placed = []
    for idx, p in enumerate(panels):
        if not isinstance(p, dict):
            ck.error(f"{context}panel #{idx}", "is not an object")
            continue
        title = p.get("title")
        where = f"{context}panel {p.get('id')!r} {title!r}"
        ptype = p.get("type")
        if not isinstance(ptype, str) or not ptype:
            ck.error(where, "no type")
        if not isinstance(title, str) or not title.strip():
            ck.error(where, "no title")
        elif ptype != "row" and title in titles:
            ck.error(where, f"title also of {titles[title]}: titles name "
                     "the panels (--print-exprs, messages)")
        elif ptype != "row":
            titles[title] = where
        pid = p.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            ck.error(where, "id is not an integer")
        elif pid in ids:
            ck.error(where, f"id {pid} is also the id of {ids[pid]}")
        else:
            ids[pid] = where
        gp = grid_of(ck, where, p)
        if gp:
            placed.append((where, gp))
        if ptype == "row":
            inner = p.get("panels") or []
            if inner and not p.get("collapsed"):
                ck.error(where, "an open row holds panels (only a collapsed "
                         "row does)")
            check_panels(ck, inner, known, counters, var_names, ds_vars, ids,
                         titles, exprs, context=f"row {title!r}: ")
            continue
        desc = p.get("description")
        if not isinstance(desc, str) or not desc.strip():
            ck.error(where, "no description")
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            ck.error(where, "no targets")
            continue
        refids = set()
        for t in targets:
            if not isinstance(t, dict):
                ck.error(where, "a target is not an object")
                continue
            ref = t.get("refId")
            tw = f"{where} target {ref}"
            if not isinstance(ref, str) or not ref:
                ck.error(tw, "no refId")
            elif ref in refids:
                ck.error(tw, "refId used twice in the panel")
            refids.add(ref)
            check_datasource(ck, tw, t.get("datasource", p.get("datasource")),
                             ds_vars)
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                ck.error(tw, "empty expr")
                continue
            check_expr(ck, tw, expr, known, counters, var_names)
            exprs.append((p, t, expr))
    check_overlaps(ck, placed)


def check_templating(ck, dash, known, counters):
    names = set()
    tlist = dash.get("templating", {})
    tlist = tlist.get("list", []) if isinstance(tlist, dict) else None
    if not isinstance(tlist, list):
        ck.error("templating", "no templating.list")
        return names
    for v in tlist:
        if not isinstance(v, dict) or not v.get("name"):
            ck.error("templating", f"a variable without a name: {v!r}")
            continue
        names.add(v["name"])
    for v in tlist:
        if not isinstance(v, dict) or v.get("type") != "query":
            continue
        where = f"variable ${v['name']}"
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if not isinstance(q, str) or not q.strip():
            ck.error(where, "empty query")
            continue
        for text in {q, v.get("definition") or q}:
            check_metric_names(ck, where, text, known)
            for kind, value, ctx in scan_expr(text):
                if kind == "unbalanced":
                    ck.error(where, f"unbalanced {value!r} in the query")
                elif kind == "ident" and value in counters and \
                        ctx not in RATE_FUNCS | {"label_values"}:
                    ck.error(where, f"counter {value} outside rate()")
            for name in variables_used(text):
                if name not in names and name not in GRAFANA_VARS:
                    ck.error(where, f"query uses ${name}, which is no "
                             "variable of the dashboard")
    return names


def substitutions(dash):
    values = dict(GRAFANA_VARS)
    for v in dash.get("templating", {}).get("list", []) or []:
        if not isinstance(v, dict) or not v.get("name"):
            continue
        if v.get("type") == "datasource":
            values[v["name"]] = "prometheus"
        elif v.get("type") in ("constant", "textbox") and \
                isinstance(v.get("query"), str) and v["query"]:
            values[v["name"]] = v["query"]
        elif v.get("type") == "interval":
            values[v["name"]] = "1m"
    return values


def rule_name(panel, target):
    raw = f"umpool_dashboard:panel{panel.get('id')}_{target.get('refId')}"
    return re.sub(r"[^A-Za-z0-9_:]", "_", raw)


def run_promtool(ck, promtool, items):
    """items: (where, record name, substituted expr). promtool check rules
    on one group per expr; on failure, each expr alone to name the panel."""
    def write_rules(path, chosen):
        with open(path, "w", encoding="utf-8") as f:
            f.write("# Written by tests/inspect/check_dashboard.py\ngroups:\n")
            for k, (where, record, expr) in enumerate(chosen):
                f.write(f"  - name: {json.dumps(f'{k}: {where}')}\n"
                        f"    rules:\n"
                        f"      - record: {record}\n"
                        f"        expr: {json.dumps(expr)}\n")

    def promtool_ok(path):
        try:
            r = subprocess.run([promtool, "check", "rules", path],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, str(e)
        return r.returncode == 0, r.stdout

    with tempfile.TemporaryDirectory(prefix="check_dashboard.") as tmp:
        path = os.path.join(tmp, "dashboard.rules.yml")
        write_rules(path, items)
        ok, out = promtool_ok(path)
        if ok is None:
            ck.error("promtool", f"cannot run {promtool}: {out}")
            return
        if ok:
            return
        bad = 0
        for item in items:
            one = os.path.join(tmp, "one.rules.yml")
            write_rules(one, [item])
            ok1, out1 = promtool_ok(one)
            if not ok1:
                bad += 1
                msg = " ".join(line.strip() for line in out1.splitlines()
                               if line.strip() and
                               not line.startswith("Checking"))
                ck.error(item[0], f"promtool rejects the expr "
                         f"{item[2]!r}: {msg}")
        if not bad:
            ck.error("promtool", "check rules failed on the whole file:\n" +
                     out)


def main(argv):
    ap = argparse.ArgumentParser(
        description="Check a Grafana dashboard of umpool metrics.")
    ap.add_argument("dashboard")
    ap.add_argument("--metrics", metavar="FILE",
                    help="a Prometheus text page whose # HELP/# TYPE names "
                    "are the known metrics (default: the built-in list)")
    ap.add_argument("--promtool", metavar="PATH",
                    help="check every expr's PromQL with PATH check rules")
    ap.add_argument("--print-exprs", action="store_true",
                    help="print 'panel title<TAB>expr' per expr on stdout")
    args = ap.parse_args(argv)

    ck = Checker()
    try:
        with open(args.dashboard, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {args.dashboard}: does not load: {e}", file=sys.stderr)
        return 1
    if not isinstance(dash, dict):
        print(f"FAIL: {args.dashboard}: not a JSON object", file=sys.stderr)
        return 1

    if args.metrics:
        try:
            known, counters = load_metrics_file(args.metrics)
        except OSError as e:
            print(f"FAIL: --metrics: {e}", file=sys.stderr)
            return 2
        if not known:
            print(f"FAIL: --metrics {args.metrics}: no # HELP or # TYPE line",
                  file=sys.stderr)
            return 1
    else:
        known = set(BUILTIN_GAUGES) | set(BUILTIN_COUNTERS)
        counters = set(BUILTIN_COUNTERS)
    counters |= {k for k in known if k.endswith("_total")}

    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int),
                      ("panels", list)):
        v = dash.get(key)
        if not isinstance(v, kind) or isinstance(v, bool) or \
                (kind is not int and not v):
            ck.error("dashboard", f"no valid {key!r}")
    var_names = check_templating(ck, dash, known, counters)
    ds_vars = datasource_vars(dash)
    if not ds_vars:
        ck.error("templating", "no datasource variable (type datasource): "
                 "the panels cannot follow the data source chosen on import")
    exprs = []
    ids = {}
    titles = {}
    panels = dash.get("panels")
    if isinstance(panels, list):
        check_panels(ck, panels, known, counters, var_names, ds_vars, ids,
                     titles, exprs)
    if not exprs:
        ck.error("dashboard", "no panel has an expr")

    values = substitutions(dash)
    items = []
    for p, t, expr in exprs:
        sub = " ".join(substitute(expr, values).split())
        where = f"panel {p.get('id')!r} {p.get('title')!r} target {t.get('refId')}"
        items.append((where, rule_name(p, t), sub))
        if args.print_exprs:
            print(f"{p.get('title')}\t{sub}")
    if args.promtool and items:
        run_promtool(ck, args.promtool, items)

    if ck.errors:
        for e in ck.errors:
            print(f"FAIL: {e}", file=sys.stderr)
        print(f"{args.dashboard}: {len(ck.errors)} problem(s)",
              file=sys.stderr)
        return 1
    print(f"{args.dashboard}: OK: {len(titles)} panels, {len(ids) - len(titles)}"
          f" rows, {len(exprs)} exprs"
          + (", promtool accepts them" if args.promtool else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
