#!/bin/sh
# umpool-inspect on a running program: tests/inspect/holder holds a pool of
# known allocations on the simulated 4-GPU PCIe box; list, show (tables,
# --json checked against what it allocated, --prometheus), watch and map
# see it; its segment goes when it destroys the pool, and stays when it is
# killed, until list --clean.
set -eu

inspect=${UMPOOL_INSPECT:-}
helpers=${UMPOOL_INSPECT_HELPERS:-}
golden=${UMPOOL_INSPECT_GOLDEN:-}
if [ -z "$inspect" ] || [ ! -x "$inspect" ] || [ ! -x "$helpers/holder" ]; then
    echo "SKIP: UMPOOL_INSPECT or UMPOOL_INSPECT_HELPERS unset or not built"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is needed to check JSON and SVG"
    exit 77
fi
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
    echo "SKIP: no writable /dev/shm: pools cannot publish here"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_inspect_live.XXXXXX")
hpid=
trap '[ -z "$hpid" ] || kill -KILL "$hpid" 2>/dev/null; rm -rf "$tmp"' EXIT
uid=$(id -u)
ns=$(stat -L -c %i /proc/self/ns/pid) # the holder's pid namespace: ours

# shellcheck source=inspect/common.sh
. "$golden/common.sh"

# start: runs the holder in the background and waits until it is READY.
# (The output file goes first: the shell truncates it in the child, maybe
# after we looked.)
start() {
    rm -f "$tmp/holder.out" "$tmp/holder.err"
    "$helpers/holder" >"$tmp/holder.out" 2>"$tmp/holder.err" &
    hpid=$!
    i=0
    until grep -q '^READY' "$tmp/holder.out" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -gt 200 ] || ! kill -0 "$hpid" 2>/dev/null; then
            cat "$tmp/holder.out" "$tmp/holder.err"
            fail "the holder did not get ready"
        fi
        sleep 0.05
    done
    [ "$(awk '/^READY/{print $2}' "$tmp/holder.out")" = "$hpid" ] ||
        fail "the holder is not the process we started"
}

segments() {
    ls /dev/shm 2>/dev/null | grep -c "^umpool-$uid-$ns-$1-" || true
}

start
cat "$tmp/holder.out"

echo "check: the pool's segment, 0600"
[ "$(segments "$hpid")" -eq 1 ] || fail "no single segment for $hpid"
seg=$(ls /dev/shm/umpool-"$uid"-"$ns"-"$hpid"-*)
[ "$(stat -c %a "$seg")" = 600 ] || fail "$seg is not 0600"

echo "check: list shows it running"
run list 0 list
grep -Eq "^ *$hpid +[0-9]+ +holder +sim +4 .* running$" "$tmp/list.out" ||
    { cat "$tmp/list.out"; fail "not listed"; }

echo "check: show --json says what the holder allocated"
run json 0 show "$hpid" --json
python3 "$golden/check_live.py" "$tmp/json.out" "$tmp/holder.out" "$hpid" ||
    { cat "$tmp/json.out"; exit 1; }

echo "check: show's tables"
run show 0 show "$hpid"
cat "$tmp/show.out"
for heading in MEMORY ALLOCATIONS "TIERS BY DEVICE" TIERS \
    "LARGEST ALLOCATIONS"; do
    grep -q "^$heading\$" "$tmp/show.out" || fail "no $heading table"
done
grep -Eq "^ +1  0x[0-9a-f]+ +64.0 MiB +0 +1 device " "$tmp/show.out" ||
    fail "the 64 MiB allocation is not first"

echo "check: --prometheus"
run prom 0 show "$hpid" --prometheus
grep -Eq "^umpool_live_allocations\{pid=\"$hpid\",pool=\"[0-9]+\",device=\"0\"\} 2\$" \
    "$tmp/prom.out" || fail "no live allocation count for device 0"
if command -v promtool >/dev/null 2>&1; then
    promtool check metrics <"$tmp/prom.out" || fail "promtool"
fi

echo "check: watch refreshes until its count"
run watch 0 watch "$hpid" --count 2 --interval 0.2
[ "$(grep -c '^umpool-inspect watch' "$tmp/watch.out")" -eq 2 ] ||
    fail "not two refreshes"
[ "$(grep -c '^rates: ' "$tmp/watch.out")" -eq 2 ] || fail "no rates"

echo "check: map --svg"
run map 0 map "$hpid" --svg "$tmp/live.svg"
python3 "$golden/check_svg.py" "$tmp/live.svg" 4

echo "check: the segment goes with ump_pool_destroy"
kill -USR1 "$hpid"
wait "$hpid" || fail "the holder failed: $(cat "$tmp/holder.err")"
grep -q '^DONE' "$tmp/holder.out" || fail "the holder did not finish"
[ "$(segments "$hpid")" -eq 0 ] || fail "segment left after destroy"
run gone 1 show "$hpid"

echo "check: a killed program's segment stays, list --clean removes it"
start
kill -KILL "$hpid"
wait "$hpid" 2>/dev/null || true
[ "$(segments "$hpid")" -eq 1 ] || fail "no segment after SIGKILL"
run dead 0 list
grep -Eq "^ *$hpid +[0-9]+ +holder .* exited$" "$tmp/dead.out" ||
    fail "not listed as exited"
run clean 0 list --clean
[ "$(segments "$hpid")" -eq 0 ] || fail "--clean left the segment"
hpid=
echo "all checks passed"
