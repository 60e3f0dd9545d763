#!/bin/sh
# The man pages render without a warning: man -l (man-db, as lintian runs
# it) or, without man, groff -man -ww. Also: every function of
# include/umpool.h has a man3 page, every ".so" page names a page that
# exists, and every page in man/ is listed in man/local.mk (so that it is
# installed and distributed). Run from the top of the build tree (make
# check); umpool.7 is generated there, the other pages are in $srcdir.
set -eu
src=${srcdir:-$(dirname "$0")/..}
build=${UMPOOL_MAN_BUILDDIR:-.}
fail=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT

if command -v man >/dev/null 2>&1 &&
   man --version 2>/dev/null | grep -q '^man '; then
  render() {
    LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 MAN_DISABLE_SECCOMP=1 \
      man --warnings -E UTF-8 -l -Tutf8 -Z "$1" >/dev/null 2>"$err"
  }
  how="man -l"
elif command -v groff >/dev/null 2>&1; then
  render() {
    LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$1" 2>"$err"
  }
  how="groff -man -ww"
else
  echo "SKIP: neither man (man-db) nor groff is installed"
  exit 77
fi

# Pages: the sources, and umpool.7 from the build tree.
if [ -f "$build/man/umpool.7" ]; then
  gen=$build/man/umpool.7
elif [ -f "$src/man/umpool.7" ]; then
  gen=$src/man/umpool.7
else
  echo "FAIL: man/umpool.7 is not built (make man/umpool.7)"
  exit 1
fi

n=0
check_page() {
  n=$((n + 1))
  first=$(sed -n '1p' "$1")
  case $first in
  .so\ *)
    target=${first#.so }
    if [ "$(wc -l <"$1")" -ne 1 ] || [ ! -f "$src/man/${target#man*/}" ]; then
      echo "FAIL: $1: expected one line '.so manN/PAGE.N' of a page in man/"
      fail=1
    fi
    return ;;
  esac
  if ! render "$1" || [ -s "$err" ]; then
    echo "FAIL: $how $1:"
    sed 's/^/  /' "$err"
    fail=1
  fi
}
for f in "$src"/man/*.[0-9]; do
  case ${f##*/} in umpool.7) continue ;; esac # the generated one, below
  if [ -f "$f" ]; then check_page "$f"; fi
done
check_page "$gen"

hdr=$src/include/umpool.h
for fn in $(sed -n 's/^[a-z].*[ *]\(ump_[a-z_]*\)(.*/\1/p' "$hdr"); do
  if [ ! -f "$src/man/$fn.3" ]; then
    echo "FAIL: $fn (include/umpool.h) has no page man/$fn.3"
    fail=1
  fi
done

for f in "$src"/man/*.[0-9] "$src"/man/umpool.7.in; do
  [ -f "$f" ] || continue
  b=${f##*/}
  [ "$f" = "$src/man/umpool.7" ] && continue
  grep -q -F "man/$b" "$src/man/local.mk" ||
    { echo "FAIL: man/$b is not listed in man/local.mk"; fail=1; }
done

[ "$fail" -eq 0 ] || exit 1
echo "man pages: $n checked with $how, one per public function"
