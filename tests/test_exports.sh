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
# Plug-ins load it with dlopen (Python's ctypes, a framework's allocator
# hook): it must load that way, with nothing preloaded, and give a pool.
if command -v python3 >/dev/null 2>&1; then
  # A sanitizer build needs its runtime loaded first (python is not built
  # with it); Python's own allocations left at exit are not ours.
  asan=$(ldd "$lib" 2>/dev/null | awk '/libasan|libclang_rt.asan/ {print $3; exit}')
  out=$(LD_PRELOAD="${asan:+$asan}" ASAN_OPTIONS="${asan:+detect_leaks=0}" python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
pool = ctypes.c_void_p()
rc = lib.ump_pool_create(b"backend:sim,sim_devices:1", ctypes.byref(pool))
print(rc, bool(pool.value))
if rc == 0:
    print(lib.ump_pool_destroy(pool))
' "$lib" 2>&1) || { echo "FAIL: python3 ctypes cannot load $lib: $out"; exit 1; }
  [ "$out" = "0 True
0" ] || { echo "FAIL: through ctypes: $out"; exit 1; }
  echo "ctypes: loads with dlopen, makes and destroys a pool"
fi
