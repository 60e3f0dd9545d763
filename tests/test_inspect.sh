#!/bin/sh
# umpool-inspect on fixed snapshots (tests/inspect/mksnap): golden output of
# show, --json and --prometheus; the SVG map; broken, foreign and dead
# processes' segments, and those of other pid namespaces, in a private
# directory (--shm-dir); usage errors; topo on the simulated machines.
set -eu

inspect=${UMPOOL_INSPECT:-}
helpers=${UMPOOL_INSPECT_HELPERS:-}
golden=${UMPOOL_INSPECT_GOLDEN:-}
if [ -z "$inspect" ] || [ ! -x "$inspect" ] || [ ! -x "$helpers/mksnap" ]; then
    echo "SKIP: UMPOOL_INSPECT or UMPOOL_INSPECT_HELPERS unset or not built"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is needed to check JSON and SVG"
    exit 77
fi
mksnap=$helpers/mksnap

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_inspect.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
uid=$(id -u)
ns=$(stat -L -c %i /proc/self/ns/pid) # our pid namespace, as in the names

# shellcheck source=inspect/common.sh
. "$golden/common.sh"

# one_line NAME: stderr holds exactly one line, stdout nothing.
one_line() {
    [ "$(wc -l <"$tmp/$1.err")" -eq 1 ] ||
        { cat "$tmp/$1.err"; fail "$1: not one line on stderr"; }
    [ ! -s "$tmp/$1.out" ] || { cat "$tmp/$1.out"; fail "$1: wrote output"; }
}

"$mksnap" "$tmp/fixed.snap"

echo "check: show, --json and --prometheus match the golden files"
run show 0 show --from "$tmp/fixed.snap"
diff -u "$golden/show.golden" "$tmp/show.out" || fail "show differs"
run json 0 show --from "$tmp/fixed.snap" --json
diff -u "$golden/show.json.golden" "$tmp/json.out" || fail "--json differs"
python3 -m json.tool "$tmp/json.out" >/dev/null || fail "--json is not JSON"
run prom 0 show --from "$tmp/fixed.snap" --prometheus
diff -u "$golden/show.prom.golden" "$tmp/prom.out" ||
    fail "--prometheus differs"

echo "check: map --svg is well-formed, one group per device and state"
run svg 0 map --from "$tmp/fixed.snap" --svg "$tmp/map.svg"
python3 "$golden/check_svg.py" "$tmp/map.svg" 4
run svgout 0 map --from "$tmp/fixed.snap" --svg -
cmp -s "$tmp/svgout.out" "$tmp/map.svg" || fail "--svg - differs from a file"

echo "check: a broken snapshot is one line and exit 1"
for how in magic version truncate grow ndev nalloc map frag; do
    "$mksnap" "$tmp/bad.snap" --break "$how"
    for fmt in "" --json --prometheus; do
        run "bad-$how" 1 show --from "$tmp/bad.snap" $fmt
        one_line "bad-$how"
    done
done
grep -q "bad magic" "$tmp/bad-magic.err" || fail "magic: $(cat "$tmp/bad-magic.err")"
grep -q "version 6, this tool reads version 5" "$tmp/bad-version.err" ||
    fail "version: $(cat "$tmp/bad-version.err")"
grep -q "truncated" "$tmp/bad-truncate.err" || fail "truncate"
: >"$tmp/empty.snap"
run empty 1 show --from "$tmp/empty.snap"
one_line empty
run missing 1 show --from "$tmp/no-such.snap"
one_line missing

# A directory standing for /dev/shm.
shm=$tmp/shm
mkdir "$shm"

echo "check: a segment written by another user is refused"
# Named for us and owned by us, but its header says another uid: what a
# file planted by someone else looks like once the owner check passes
# (the owner check itself: test_inspect_parse).
"$mksnap" "$shm/umpool-$uid-$ns-$$-1" --uid $((uid + 4242)) --pid $$ \
    --pool 1 --pid-ns "$ns"
run foreign 1 list --shm-dir "$shm"
grep -q "written by uid $((uid + 4242)), not by you" "$tmp/foreign.err" ||
    fail "foreign: $(cat "$tmp/foreign.err")"
run foreign-show 1 show $$ --shm-dir "$shm"
[ "$(wc -l <"$tmp/foreign-show.err")" -eq 1 ] || fail "foreign show"
run foreign-clean 1 list --clean --shm-dir "$shm"
[ -e "$shm/umpool-$uid-$ns-$$-1" ] || fail "--clean removed another's segment"
rm -f "$shm/umpool-$uid-$ns-$$-1"

echo "check: a file under our name that another user owns is skipped"
if [ "$uid" -eq 0 ]; then
    # Another user's unreadable file once failed every reader.
    "$mksnap" "$shm/umpool-$uid-$ns-$$-1" --pid $$ --pool 1 --pid-ns "$ns"
    : >"$shm/.umpool-$uid-$ns-999999-2"
    chown 4242 "$shm/umpool-$uid-$ns-$$-1" "$shm/.umpool-$uid-$ns-999999-2"
    chmod 000 "$shm/umpool-$uid-$ns-$$-1"
    # list --clean looks at half-made (hidden) files too.
    for args in "list:1 segment" "show --prometheus:1 segment" \
        "show --json:1 segment" "list --clean --json:2 segments"; do
        # shellcheck disable=SC2086
        run owned 0 ${args%%:*} --shm-dir "$shm"
        [ "$(wc -l <"$tmp/owned.err")" -eq 1 ] &&
            grep -q "skipped ${args#*:} named for you but owned by another" \
                "$tmp/owned.err" || fail "$args: $(cat "$tmp/owned.err")"
    done
    grep -q '"pools": \[ *\]' "$tmp/owned.out" || fail "list --clean listed it"
    [ -e "$shm/umpool-$uid-$ns-$$-1" ] &&
        [ -e "$shm/.umpool-$uid-$ns-999999-2" ] ||
        fail "--clean removed another user's files"
    rm -f "$shm/umpool-$uid-$ns-$$-1" "$shm/.umpool-$uid-$ns-999999-2"
else
    echo "  (skipped: only root can give a file to another user)"
fi

echo "check: segments of processes that exited are shown and cleaned"
sh -c 'exit 0' &
dead=$!
wait "$dead" || true
start=$(awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$$/stat")
"$mksnap" "$shm/umpool-$uid-$ns-$dead-1" --pid "$dead" --pool 1 --pid-ns "$ns"
"$mksnap" "$shm/umpool-$uid-$ns-$$-2" --pid $$ --pool 2 --pid-start 1 \
    --pid-ns "$ns" # reused
"$mksnap" "$shm/umpool-$uid-$ns-$$-3" --pid $$ --pool 3 --pid-start "$start" \
    --pid-ns "$ns"
: >"$shm/.umpool-$uid-$ns-$dead-4"  # left half made by a crash
"$mksnap" "$shm/umpool-$((uid + 1))-$ns-$dead-5" --pid "$dead" --pool 5 \
    --pid-ns "$ns" # not ours
# Another pid namespace (a container sharing /dev/shm): its pids say
# nothing here, dead or alive.
other=$((ns + 1))
"$mksnap" "$shm/umpool-$uid-$other-$dead-6" --pid "$dead" --pool 6 \
    --pid-ns "$other"
"$mksnap" "$shm/umpool-$uid-$other-$$-7" --pid $$ --pool 7 --pid-ns "$other"
: >"$shm/.umpool-$uid-$other-$dead-8"
"$mksnap" "$shm/umpool-$uid-$dead-9" --pid "$dead" --pool 9 # the old form
# Left by an exited process of another version (an upgrade): a note.
"$mksnap" "$shm/umpool-$uid-$ns-$dead-10" --pid "$dead" --pool 10 \
    --pid-ns "$ns" --break version
run list 0 list --shm-dir "$shm"
cat "$tmp/list.out"
grep -q "note: .*umpool-$uid-$ns-$dead-10: snapshot version .*its process exited" \
    "$tmp/list.err" || fail "another version's dead segment: $(cat "$tmp/list.err")"
grep -Eq "^ *$dead +1 .* exited$" "$tmp/list.out" || fail "dead pid not exited"
grep -Eq "^ *$$ +2 .* exited \(pid reused\)$" "$tmp/list.out" ||
    fail "reused pid not recognised"
grep -Eq "^ *$$ +3 .* running$" "$tmp/list.out" || fail "live pid not running"
grep -Eq "^ *$dead +6 .* unknown \(other pid namespace\)$" "$tmp/list.out" ||
    fail "other namespace's dead pid not unknown"
grep -Eq "^ *$$ +7 .* unknown \(other pid namespace\)$" "$tmp/list.out" ||
    fail "other namespace's pid not unknown"
[ "$(grep -c trainer "$tmp/list.out")" -eq 5 ] || fail "other users' listed"
run listjson 0 list --json --shm-dir "$shm"
python3 - "$tmp/listjson.out" "$dead" $$ "$ns" <<'EOF' || fail "list --json"
import json, sys
pools = json.load(open(sys.argv[1]))["pools"]
got = sorted((p["pid"], p["pool"], p["status"], p["pid_ns"]) for p in pools)
dead, me, ns = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
want = sorted([(dead, 1, "exited", ns), (me, 2, "exited", ns),
               (me, 3, "running", ns), (dead, 6, "unknown", ns + 1),
               (me, 7, "unknown", ns + 1)])
assert got == want, got
EOF
run showall 0 show --shm-dir "$shm"
grep '^pool ' "$tmp/showall.out" | sed 's/ (.*//' | sort >"$tmp/showall.pools"
printf 'pool 3 of pid %s\npool 6 of pid %s\npool 7 of pid %s\n' $$ "$dead" $$ |
    sort >"$tmp/showall.want"
diff -u "$tmp/showall.want" "$tmp/showall.pools" ||
    fail "show without PID: not the running pools and those that may run"
grep -q "written in another pid namespace" "$tmp/showall.out" ||
    fail "no note on another namespace's pool"
run showdead 0 show "$dead" --shm-dir "$shm"
grep -q "its process exited" "$tmp/showdead.out" || fail "no exited note"
run clean 0 list --clean --shm-dir "$shm"
for f in "umpool-$uid-$ns-$dead-1" "umpool-$uid-$ns-$$-2" \
    ".umpool-$uid-$ns-$dead-4" "umpool-$uid-$ns-$dead-10"; do
    [ ! -e "$shm/$f" ] || fail "--clean left $f"
done
[ -e "$shm/umpool-$uid-$ns-$$-3" ] || fail "--clean removed a running one"
[ -e "$shm/umpool-$((uid + 1))-$ns-$dead-5" ] ||
    fail "--clean removed another's"
for f in "umpool-$uid-$other-$dead-6" "umpool-$uid-$other-$$-7" \
    ".umpool-$uid-$other-$dead-8" "umpool-$uid-$dead-9"; do
    [ -e "$shm/$f" ] || fail "--clean removed $f"
done
grep -q "removed .*umpool-$uid-$ns-$dead-1" "$tmp/clean.err" || fail "not said"
run nopid 1 show 999999999 --shm-dir "$shm"
one_line nopid
# Another version's segment of a running process is an error.
"$mksnap" "$shm/umpool-$uid-$ns-$$-11" --pid $$ --pool 11 --pid-start "$start" \
    --pid-ns "$ns" --break version
run newer 1 list --shm-dir "$shm"
grep -q "umpool-$uid-$ns-$$-11: snapshot version" "$tmp/newer.err" ||
    fail "a running process's other version not said"
! grep -q "note:" "$tmp/newer.err" || fail "a running process's other version is a note"
rm -f "$shm/umpool-$uid-$ns-$$-11"
run map 0 map $$ --pool 3 --svg "$tmp/one.svg" --shm-dir "$shm"
python3 "$golden/check_svg.py" "$tmp/one.svg" 4

echo "check: usage errors exit 2, help exits 0"
run help 0 help
grep -q "^Usage: umpool-inspect COMMAND" "$tmp/help.out" || fail "help"
for args in "" "frobnicate" "list --svg x" "show --clean" "show 12 13" \
    "map 12" "show --json --prometheus" "topo 12" "watch --count 0" \
    "show --pool" "show --pool x"; do
    # shellcheck disable=SC2086
    run usage 2 $args
done

echo "check: topo of the simulated machines"
run topo 0 topo --topology pcie-4gpu
grep -Eq "^GPU0 +X +PIX +SYS\* +SYS\*" "$tmp/topo.out" || fail "pcie-4gpu"
grep -q "no peer access" "$tmp/topo.out" || fail "no nopeer legend"
run topo8 0 topo --topology dgx-h200
grep -Eq "^GPU7 +NV +NV +NV +NV +NV +NV +NV +X " "$tmp/topo8.out" ||
    fail "dgx-h200"
run topojson 0 topo --topology nvlink-pairs-4gpu --json
python3 - "$tmp/topojson.out" <<'EOF' || fail "topo --json"
import json, sys
t = json.load(open(sys.argv[1]))
assert len(t["devices"]) == 4 and len(t["links"]) == 16, t
kinds = {(l["from"], l["to"]): l["kind"] for l in t["links"]}
assert kinds[(0, 0)] == "self" and kinds[(0, 1)] == "nvlink", kinds
EOF
run topobad 1 topo --topology "$tmp/no-such.topo"
run topocomma 1 topo --topology "a,b"
echo "all checks passed"
