#!/bin/sh
# Fails when a file of lib/ includes a header of a layer above its own (the
# order is in lib/layers), naming the file, the line and the include. An
# include, quoted or in <>, resolves next to the including file first (for
# quotes), then from lib/ (as -I lib does); system headers, config.h and
# include/ are not layers.
srcdir=${srcdir:-.}
lib=$srcdir/lib
[ -f "$lib/layers" ] || { echo "check-layers: no $lib/layers" >&2; exit 99; }
order=$(grep -v '^#' "$lib/layers" | grep -v '^$' | tr '\n' ' ')

rank() { # rank of layer $1 (the lib/ root, "", is above all), or empty
    [ -z "$1" ] && { echo 1000; return; }
    i=0
    for l in $order; do
        [ "$l" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
}

# layer of a path relative to lib/: its first folder ("" for lib/ itself)
layer_of() { case $1 in */*) echo "${1%%/*}" ;; *) echo "" ;; esac; }

bad=0 nfiles=0
for f in $(cd "$lib" && find . -name '*.[ch]' | sed 's#^\./##' | sort); do
    nfiles=$((nfiles + 1))
    own=$(layer_of "$f")
    r_own=$(rank "$own")
    if [ -z "$r_own" ]; then
        echo "lib/$f: folder '$own' is not a layer in lib/layers"
        bad=1
        continue
    fi
    dir=$(dirname "$f")
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$lib/$f" |
    while IFS= read -r line; do
        n=${line%%:*}
        inc=$(printf '%s\n' "$line" |
              sed 's/.*include[[:space:]]*["<]\([^">]*\)[">].*/\1/')
        quoted=0
        case $line in *include*'"'*) quoted=1 ;; esac
        if [ "$quoted" -eq 1 ] && [ -f "$lib/$dir/$inc" ]; then
            target=$(cd "$lib/$dir" && cd "$(dirname "$inc")" && pwd)
            target=${target#"$(cd "$lib" && pwd)"}
            target=${target#/}/$(basename "$inc")
            target=${target#/}
        elif [ -f "$lib/$inc" ]; then
            target=$inc
        else
            continue # config.h, include/umpool.h, system headers
        fi
        case $target in ../*|/*) continue ;; esac
        t=$(layer_of "$target")
        r_t=$(rank "$t")
        if [ -z "$r_t" ] || [ "$r_t" -gt "$r_own" ]; then
            echo "lib/$f:$n: includes \"$inc\" (layer '${t:-lib}') above its own ('${own:-lib}')"
            echo x
        fi
    done
done > check-layers.out
grep -v '^x$' check-layers.out
if grep -q '^x$' check-layers.out || [ "$bad" -ne 0 ]; then
    rm -f check-layers.out
    exit 1
fi
rm -f check-layers.out
echo "check-layers: $nfiles files of lib/ include only their own layer and those below"
