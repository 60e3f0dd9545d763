#!/bin/sh
# Fails when a file of lib/ includes a header of a layer above its own (the
# order is in lib/layers), naming the file, the line and the include. An
# include, quoted or in <>, resolves next to the including file first (for
# quotes), then from lib/ (as -I lib does); system headers, config.h and
# include/ are not layers. The top-level policies/ is the place layer's
# plug-in home: its built-ins are checked as files of lib/place/, and its
# example plug-in (example.c) may include no header of lib/ at all.
#
# Then, inside lib/coll/, the public calls sit on top: no file calls an
# entry point (UMP_EXPORT) that another file of the layer defines; the
# layer's own steps go through its internal coll_* functions (run.h).
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
for f in $(cd "$lib" && find . ../policies -name '*.[ch]' |
          sed 's#^\./##' | sort); do
    nfiles=$((nfiles + 1))
    case $f in
    ../policies/*) own=place name=${f#../} ;;
    *) own=$(layer_of "$f") name=lib/$f ;;
    esac
    r_own=$(rank "$own")
    if [ -z "$r_own" ]; then
        echo "$name: folder '$own' is not a layer in lib/layers"
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
        # The example plug-in is built against the public header only.
        if [ "$name" = policies/example.c ]; then
            echo "$name:$n: includes \"$inc\" of lib/: a plug-in includes <umpool.h> only"
            echo x
            continue
        fi
        t=$(layer_of "$target")
        r_t=$(rank "$t")
        if [ -z "$r_t" ] || [ "$r_t" -gt "$r_own" ]; then
            echo "$name:$n: includes \"$inc\" (layer '${t:-lib}') above its own ('${own:-lib}')"
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
echo "check-layers: $nfiles files of lib/ and policies/ include only their own layer and those below"

# The entry points of lib/coll/ and where each is defined.
bad=0
grep -n '^UMP_EXPORT' "$lib"/coll/*.c /dev/null |
    sed -n 's#^\([^:]*\):[0-9]*:.*[ *]\(ump_[a-z0-9_]*\)(.*#\1 \2#p' > check-layers.pub
while read -r def fn; do
    for g in "$lib"/coll/*.c; do
        [ "$g" = "$def" ] && continue
        # A call: the name then '(', outside comments and strings (lines
        # that are comments, or a log line naming the call, are skipped).
        grep -n "[^a-z0-9_\"]$fn(" "$g" |
            grep -v '^[0-9]*:[[:space:]]*/\?\*' |
            sed "s#^#lib/coll/${g##*/}:#; s#\$# (calls $fn, an entry point of ${def##*/})#"
    done
done < check-layers.pub > check-layers.out
rm -f check-layers.pub
if [ -s check-layers.out ]; then
    cat check-layers.out
    echo "check-layers: inside lib/coll/, call the internal coll_* functions, not the layer's public entry points"
    bad=1
fi
rm -f check-layers.out
[ "$bad" -eq 0 ] || exit 1
echo "check-layers: lib/coll/ calls none of its own entry points"
