#!/bin/sh
# umpool-inspect serve, scraped by a real Prometheus: tests/inspect/holder
# holds a pool; the exporter serves it on a free loopback port; promtool
# checks the page; malformed, oversized and silent clients and 50
# concurrent scrapes leave it serving; next to 127 silent connections
# (one short of its limit) every scrape is answered, and next to 130
# clients trickling their headers a byte at a time; a Prometheus server
# (its prometheus.yml and storage written here) scrapes it every second, and
# its HTTP API reports the holder's live bytes as the exporter does; the
# holder exits mid-scrape and leaves the page. The GPU gauges: absent
# without NVML (UMPOOL_NVML_LIBRARY=/nonexistent); on the fake NVML of
# tests/fake_cuda.c, exact, one failed query left out, joined with a pool
# on the fake driver by pci_bus_id (said, not failed, where the fake is not
# built: no cuda.h). Everything stops by itself and uses loopback only.
# SKIP without libmicrohttpd (serve exits 2), prometheus or python3: CI
# installs them (scripts/install-deps).
set -eu

inspect=${UMPOOL_INSPECT:-}
helpers=${UMPOOL_INSPECT_HELPERS:-}
golden=${UMPOOL_INSPECT_GOLDEN:-}
if [ -z "$inspect" ] || [ ! -x "$inspect" ] || [ ! -x "$helpers/holder" ]; then
    echo "SKIP: UMPOOL_INSPECT or UMPOOL_INSPECT_HELPERS unset or not built"
    exit 77
fi
for tool in python3 prometheus promtool; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool is not installed (scripts/install-deps installs it)"
        exit 77
    fi
done
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
    echo "SKIP: no writable /dev/shm: pools cannot publish here"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_inspect_serve.XXXXXX")
hpid= spid= ppid= gpid= chpid= gpupage=
cleanup() {
    for p in $hpid $spid $ppid $gpid $chpid; do
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=inspect/common.sh
. "$golden/common.sh"
check() { python3 "$golden/check_serve.py" "$@"; }

# waitfor FILE PATTERN PID WHAT: until FILE has a line matching PATTERN
# (10 s), while PID lives.
waitfor() {
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 200 ] || ! kill -0 "$3" 2>/dev/null; then
            cat "$1" 2>/dev/null || true
            fail "$4"
        fi
        sleep 0.05
    done
}

"$helpers/holder" >"$tmp/holder.out" 2>"$tmp/holder.err" &
hpid=$!
waitfor "$tmp/holder.out" '^READY' "$hpid" "the holder did not get ready"

echo "check: serve on a free loopback port, without NVML"
UMPOOL_NVML_LIBRARY=/nonexistent \
    "$inspect" serve --listen 127.0.0.1:0 2>"$tmp/serve.err" &
spid=$!
i=0
until grep -q 'http://' "$tmp/serve.err" 2>/dev/null; do
    i=$((i + 1))
    if ! kill -0 "$spid" 2>/dev/null; then
        rc=0
        wait "$spid" || rc=$?
        spid=
        if [ "$rc" -eq 2 ]; then
            cat "$tmp/serve.err"
            echo "SKIP: umpool-inspect was built without libmicrohttpd"
            exit 77
        fi
        cat "$tmp/serve.err"
        fail "serve exited $rc"
    fi
    [ "$i" -lt 200 ] || fail "serve did not say where it listens"
    sleep 0.05
done
cat "$tmp/serve.err"
port=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' \
    "$tmp/serve.err")
[ -n "$port" ] || fail "no port in: $(cat "$tmp/serve.err")"

check "$port" "$hpid" >"$tmp/served.out" || { cat "$tmp/served.out"; exit 1; }
cat "$tmp/served.out"
want=$(tail -n 1 "$tmp/served.out")
"$inspect" show "$hpid" --prometheus >"$tmp/show.prom" ||
    fail "show --prometheus of the holder"
python3 - "$tmp/show.prom" "$hpid" "$want" <<'EOF' ||
import sys
total = sum(int(float(l.rsplit(" ", 1)[1]))
            for l in open(sys.argv[1])
            if l.startswith("umpool_live_bytes{") and
            'pid="%s"' % sys.argv[2] in l)
sys.exit(0 if total == int(sys.argv[3]) else 1)
EOF
    fail "the page's live bytes differ from show --prometheus's"

grep -q 'GPU gauges off: no NVML (/nonexistent' "$tmp/serve.err" ||
    fail "serve did not say why the GPU gauges are off"
check "$port" "$hpid" nogpus || exit 1

echo "check: promtool check metrics on the page"
python3 -c "import sys, urllib.request as u;
sys.stdout.write(u.urlopen('http://127.0.0.1:$port/metrics').read().decode())" \
    >"$tmp/page.prom"
promtool check metrics <"$tmp/page.prom" || fail "promtool refused the page"

echo "check: bad clients and concurrent scrapes"
check "$port" "$hpid" abuse || exit 1
kill -0 "$spid" || fail "serve died"

echo "check: one short of the connection limit, every scrape answered"
check "$port" "$hpid" nearlimit "$spid" || exit 1
echo "check: 130 clients trickling their headers, scrapes answered"
check "$port" "$hpid" trickle || exit 1
kill -0 "$spid" || fail "serve died"

# The GPU gauges on the fake NVML: tests/fake_cuda.c as libnvidia-ml, 4
# devices whose gauges follow from their index, GPU 1's first temperature
# query failing (NVML_ERROR_NOT_SUPPORTED); a second holder keeps a pool on
# the fake driver, whose devices share the fake NVML's bus ids.
fake=${UMPOOL_TEST_PLUGINS:-/nonexistent}/libfakecuda.so
if [ -f "$fake" ]; then
    echo "check: GPU gauges from the fake NVML, 4 GPUs"
    UMPOOL_CUDA_DRIVER=$fake UMPOOL_FAKE_CUDA=devices=4,mem=256,hostmem=256 \
        "$helpers/holder" backend:cuda >"$tmp/cholder.out" \
        2>"$tmp/cholder.err" &
    chpid=$!
    waitfor "$tmp/cholder.out" '^READY' "$chpid" \
        "the holder on the fake driver did not get ready"
    UMPOOL_NVML_LIBRARY=$fake \
        UMPOOL_FAKE_CUDA=devices=4,fail=nvmlDeviceGetTemperature:2:3 \
        "$inspect" serve --listen 127.0.0.1:0 2>"$tmp/gserve.err" &
    gpid=$!
    waitfor "$tmp/gserve.err" 'http://' "$gpid" "serve on the fake NVML"
    gport=$(sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' \
        "$tmp/gserve.err")
    check "$gport" "$chpid" gpus 4 1 "$tmp/gpus" || exit 1
    gpupage=$tmp/gpus.2
    for page in "$tmp/gpus.1" "$tmp/gpus.2"; do
        promtool check metrics <"$page" ||
            fail "promtool refused the page with GPU gauges ($page)"
    done
    cat "$tmp/gserve.err"
    [ "$(grep -c 'nvmlDeviceGetTemperature of GPU 1 failed: Not Supported' \
        "$tmp/gserve.err")" -eq 1 ] ||
        fail "the failed temperature query not said once"
    ! grep -q 'GPU gauges off' "$tmp/gserve.err" ||
        fail "the GPU gauges are off on the fake NVML"
    kill -TERM "$gpid"
    rc=0
    wait "$gpid" || rc=$?
    gpid=
    [ "$rc" -eq 0 ] || fail "serve on the fake NVML exited $rc on SIGTERM"
    kill -USR1 "$chpid"
    wait "$chpid" || fail "the holder on the fake driver failed on its way out"
    chpid=
else
    echo "check: GPU gauges from the fake NVML: not run (the fake driver is" \
        "not built: no cuda.h)"
fi

echo "check: a Prometheus server scrapes it every second"
pport=$(python3 -c "import socket; s = socket.socket();
s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: umpool
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
prometheus --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/data" \
    --web.listen-address="127.0.0.1:$pport" >"$tmp/prom.log" 2>&1 &
ppid=$!
check "$pport" "$hpid" query "$want" ||
    { tail -n 20 "$tmp/prom.log"; exit 1; }

echo "check: the link counters in Prometheus: the holder's tier move and" \
    "allreduce, exactly"
evicted=$(awk '$1 == "ALLOC" && $4 == 2 { print $3 }' "$tmp/holder.out")
set -- $(awk '$1 == "ALLREDUCE" { print $2, $3 }' "$tmp/holder.out")
[ -n "$evicted" ] && [ $# -eq 2 ] || fail "the holder did not say its moves"
check "$pport" "$hpid" traffic "$evicted" "$1" "$2" || exit 1

echo "check: every expression of the Grafana dashboard, in Prometheus"
python3 "$golden/check_dashboard.py" "$golden/../../contrib/grafana/umpool.json" \
    --print-exprs >"$tmp/exprs" || fail "check_dashboard.py --print-exprs"
sleep 2 # two scrapes for rate() after the last change
check "$pport" "$hpid" dashboard "$tmp/exprs" || exit 1

if [ -n "$gpupage" ]; then
    echo "check: the dashboard asks only for metrics served"
    python3 -c "import sys, urllib.request as u;
sys.stdout.write(u.urlopen('http://127.0.0.1:$port/metrics').read().decode())" \
        >"$tmp/page2.prom"
    cat "$tmp/page2.prom" "$gpupage" >"$tmp/all.prom"
    python3 "$golden/check_dashboard.py" \
        "$golden/../../contrib/grafana/umpool.json" --metrics "$tmp/all.prom" ||
        fail "the dashboard asks for metrics the exporter does not serve"
fi

echo "check: the README lists every metric family served"
check "$port" "$hpid" documented "$golden/../../README.md" \
    ${gpupage:+"$gpupage"} || exit 1

echo "check: the holder exits while scrapes go on"
check "$port" "$hpid" churn &
cpid=$!
sleep 0.3
held=$hpid
kill -USR1 "$hpid"
wait "$hpid" || fail "the holder failed on its way out"
hpid=
wait "$cpid" || fail "scrapes failed while the holder exited"
check "$port" "$held" gone || exit 1
kill -0 "$spid" || fail "serve died"

echo "check: SIGTERM stops it, exit 0"
kill -TERM "$spid"
rc=0
wait "$spid" || rc=$?
spid=
[ "$rc" -eq 0 ] || fail "serve exited $rc on SIGTERM"
kill -TERM "$ppid" 2>/dev/null || true
wait "$ppid" 2>/dev/null || true
ppid=
echo "PASS"
