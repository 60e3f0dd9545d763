/*
 * libFuzzer target: the snapshot parser on any bytes, then every output
 * of umpool-inspect on what it accepts. Built with clang's
 * -fsanitize=fuzzer (configure --enable-fuzz); seeds come from
 * tests/inspect/mksnap. test_inspect_parse calls the same entry on its own
 * corpus in every make check.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_entry.h"
#include "inspect_fmt.h"
#include "publish/snapshot.h"

int fuzz_snapshot_one(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (!sink)
        sink = fopen("/dev/null", "w");
    if (!sink)
        abort();
    struct snap_expect ex = {FUZZ_UID, FUZZ_UID, 0, 0, 0};
    struct snap_view v;
    char err[256] = "";
    int rc = snap_parse(data, size, &ex, &v, err, sizeof(err));
    if (rc) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every rejection is one line saying why */
        return rc;
    }
    struct fmt_pool p = {&v, NULL};
    fmt_show(sink, &p);
    fmt_show_json(sink, &p, 1);
    fmt_prometheus(sink, &p, 1);
    fmt_svg(sink, &v);
    snap_view_free(&v);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_snapshot_one(data, size);
    return 0;
}
