#!/bin/sh
# Runs the Python package's tests (tests/python/test_umpool.py, unittest)
# against the build tree's libumpool, with the Python configure found
# (UMPOOL_PYTHON). SKIP where there is none with NumPy.
set -eu
py=${UMPOOL_PYTHON:-}
if [ -z "$py" ] || [ "$py" = : ] || ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: no Python 3 with NumPy (configure's PYTHON: '${py}')"
    exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
lib=${UMPOOL_BUILDDIR:-.}/lib/.libs/libumpool.so.0
# A sanitizer build needs its runtime loaded first (python is not built
# with it); leaks of the interpreter are not ours.
asan=$(ldd "$lib" 2>/dev/null | awk '/libasan|libclang_rt.asan/ {print $3; exit}')
cd "$here"
exec env LD_PRELOAD="${asan:+$asan}" \
    ASAN_OPTIONS="${asan:+detect_leaks=0}" \
    PYTHONPATH="$here/../../bindings/python" UMPOOL_LIBRARY="$lib" \
    PYTHONDONTWRITEBYTECODE=1 "$py" -m unittest -v test_umpool
