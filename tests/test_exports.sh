#!/bin/sh
# libumpool.so exports the public API only: every defined dynamic symbol is
# ump_* or umpool_*, every one carries the version of lib/libumpool.map, and
# every function of include/umpool.h is there.
set -eu
lib=${UMPOOL_LIBDIR:-lib}/.libs/libumpool.so
if [ ! -f "$lib" ]; then
  echo "SKIP: $lib not built (static-only build?)"
  exit 77
fi
# The version script's node (an absolute symbol, type A) is no function;
# every other symbol carries its version: name@@UMPOOL_x.y.
all=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}')
unversioned=$(printf '%s\n' "$all" | grep -v '@@\{0,1\}UMPOOL_' || true)
if [ -n "$unversioned" ]; then
  echo "FAIL: exported without a version (lib/libumpool.map):"
  printf '  %s\n' $unversioned
  exit 1
fi
syms=$(printf '%s\n' "$all" | sed 's/@.*//')
bad=$(printf '%s\n' "$syms" | grep -v -E '^(ump_|umpool_)' || true)
if [ -n "$bad" ]; then
  echo "FAIL: symbols outside the public API are exported:"
  printf '  %s\n' $bad
  exit 1
fi
hdr=$(dirname "$0")/../include/umpool.h
missing=
for f in $(sed -n 's/^[a-z].*[ *]\(ump_[a-z_]*\)(.*/\1/p' "$hdr"); do
  printf '%s\n' "$syms" | grep -qx "$f" || missing="$missing $f"
done
if [ -n "$missing" ]; then
  echo "FAIL: declared in umpool.h but not exported:$missing"
  exit 1
fi
echo "exports: $(printf '%s\n' "$syms" | wc -l) symbols, all public"
