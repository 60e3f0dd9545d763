#!/bin/sh
# promtool check metrics on umpool-inspect's Prometheus output (the fixed
# snapshot of tests/inspect/mksnap). SKIP where promtool is not installed
# (Debian package prometheus).
set -eu

inspect=${UMPOOL_INSPECT:-}
helpers=${UMPOOL_INSPECT_HELPERS:-}
if [ -z "$inspect" ] || [ ! -x "$inspect" ] || [ ! -x "$helpers/mksnap" ]; then
    echo "SKIP: UMPOOL_INSPECT or UMPOOL_INSPECT_HELPERS unset or not built"
    exit 77
fi
if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIP: promtool not installed (Debian package prometheus)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_inspect_promtool.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$helpers/mksnap" "$tmp/fixed.snap"
"$inspect" show --from "$tmp/fixed.snap" --prometheus >"$tmp/metrics"
echo "check: promtool check metrics finds no problem"
if ! promtool check metrics <"$tmp/metrics" >"$tmp/lint" 2>&1; then
    cat "$tmp/lint"
    echo "FAIL: promtool check metrics"
    exit 1
fi
[ ! -s "$tmp/lint" ] || { cat "$tmp/lint"; echo "FAIL: lint warnings"; exit 1; }
echo "promtool: $(grep -c '^umpool_' "$tmp/metrics") samples, no problem"
