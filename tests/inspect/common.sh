# Shared by the umpool-inspect script tests (sourced): $inspect is the tool,
# $tmp a scratch directory.

fail() {
    echo "FAIL: $*"
    exit 1
}

# run NAME WANT ARGS...: runs the tool, stdout to $tmp/NAME.out, stderr to
# $tmp/NAME.err, and fails unless it exits WANT.
run() {
    name=$1 want=$2
    shift 2
    rc=0
    "$inspect" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
    if [ "$rc" -ne "$want" ]; then
        cat "$tmp/$name.out" "$tmp/$name.err"
        fail "umpool-inspect $* exited $rc, expected $want"
    fi
}
