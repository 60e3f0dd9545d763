#!/bin/sh
# Runs the preload's test programs under LD_PRELOAD=libumpool-preload.so
# against the fake CUDA driver, found as libcuda.so.1 (a folder of links
# put first in LD_LIBRARY_PATH), with 2 fake devices and backend:cuda.
# SKIP where the preload or the fake is not built (no cuda.h).
set -eu
build=${UMPOOL_BUILDDIR:-.}
pre=$build/preload/.libs/libumpool-preload.so
fake=$build/tests/.libs/libcuda.so
if [ ! -f "$pre" ] || [ ! -f "$fake" ]; then
    echo "SKIP: libumpool-preload or the fake libcuda is not built (no cuda.h)"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_preload.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ln -s "$(cd "$(dirname "$fake")" && pwd)/libcuda.so" "$tmp/libcuda.so.1"
ln -s "$(cd "$(dirname "$fake")" && pwd)/libcuda.so" "$tmp/libcuda.so"
# The fake answers for NVML too.
ln -s "$(cd "$(dirname "$fake")" && pwd)/libcuda.so" "$tmp/libnvidia-ml.so.1"
libs="$tmp:$build/lib/.libs:$build/preload/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
supp=$(cd "$(dirname "$0")" && pwd)/lsan.supp
fail=0
# run PROGRAM MODE [CONF]: under the preload (after the sanitizer's runtime, which
# must come first when the programs are built with it).
run() {
    bin=$build/tests/preload/.libs/$1
    [ -x "$bin" ] || bin=$build/tests/preload/$1
    asan=$(LD_LIBRARY_PATH=$libs ldd "$bin" 2>/dev/null |
        awk '/libasan|libclang_rt.asan/ {print $3; exit}')
    # Under LSan, threads left at exit (an OpenMP team's) with the dynamic
    # TLS of a dlopened library (the fake driver's) crash its tracer (gcc
    # 12's LSan with glibc 2.36): that run scans no TLS.
    lsan="suppressions=$supp:print_suppressions=0"
    [ "$2" = omp ] && lsan="$lsan:use_tls=0"
    echo "== $1 $2"
    if ! env LSAN_OPTIONS="$lsan" LD_LIBRARY_PATH="$libs" LD_PRELOAD="${asan:+$asan }$(cd "$(dirname "$pre")" && pwd)/libumpool-preload.so" \
        UMPOOL_FAKE_CUDA=devices=2 UMPOOL_CONF=backend:cuda${3:+,$3} \
        UMPOOL_PRELOAD_LOG=1 UMPOOL_CUDA_DRIVER= \
        timeout 120 "$bin" "$2"; then
        echo "FAIL: $1 $2"
        fail=1
    fi
}
for prog in test_preload_byname test_preload_dlopen; do
    for mode in basic host race omp none fork ipc; do
        run "$prog" "$mode"
    done
    run "$prog" overflow overflow:host
    # Every process of the job in one pool: the first shares it, the next
    # joins it (in the test's own socket directory).
    XDG_RUNTIME_DIR=$tmp run "$prog" share "share:preload-$prog"
done
exit $fail
