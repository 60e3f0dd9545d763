/*
 * Footprint: the allocation trace of a small transformer training run with
 * variable sequence lengths (tests/train-small.trace, written by
 * scripts/gen-train-trace --preset small), replayed through ump_alloc and
 * ump_free on one simulated device. The pool must reuse what it has before
 * it grows: on a device three times the trace's peak, the physical memory
 * it holds at its peak stays within 5% of the peak of the bytes live (the
 * requested sizes), and no allocation fails. The first and last words of
 * every allocation carry its ID, checked at its free: stitching and cutting
 * must never hand out memory in use.
 */
#include "config.h"

#include "testutil.h"

#include <stdio.h>

struct op {
    unsigned id;
    size_t bytes; /* 0: a free */
};

static struct op *ops;
static size_t nops, nids, peak_live;

static int load(void **state)
{
    (void)state;
    const char *dir = getenv("UMPOOL_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof(path), "%s/train-small.trace", dir ? dir : "tests");
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, live = 0;
    ops = malloc(cap * sizeof(*ops));
    size_t *sizes = calloc(1 << 16, sizeof(*sizes));
    char kind;
    unsigned id;
    unsigned long long bytes;
    char line[128];
    while (ops && sizes && fgets(line, sizeof(line), f)) {
        int got = sscanf(line, "%c %u %llu", &kind, &id, &bytes);
        if (got < 2 || id >= (1u << 16) || (kind == 'a' && got != 3))
            return -1;
        if (nops == cap)
            ops = realloc(ops, (cap *= 2) * sizeof(*ops));
        ops[nops++] = (struct op){id, kind == 'a' ? (size_t)bytes : 0};
        if (kind == 'a') {
            sizes[id] = bytes;
            live += bytes;
            if (live > peak_live)
                peak_live = live;
        } else {
            live -= sizes[id];
        }
        if (id >= nids)
            nids = id + 1;
    }
    free(sizes);
    fclose(f);
    return ops && nops > 100 ? 0 : -1;
}

static int unload(void **state)
{
    (void)state;
    free(ops);
    return 0;
}

/* The ID in the first and the last word (in its first bytes only, for an
 * allocation smaller than two words). */
static void mark(void *p, size_t n, uint64_t id)
{
    if (n < 2 * sizeof(id)) {
        memcpy(p, &id, n < sizeof(id) ? n : sizeof(id));
        return;
    }
    memcpy(p, &id, sizeof(id));
    memcpy((char *)p + n - sizeof(id), &id, sizeof(id));
}

static void expect_mark(const void *p, size_t n, uint64_t id)
{
    size_t k = n < sizeof(id) ? n : sizeof(id);
    uint64_t want = 0, first = 0, last;
    memcpy(&want, &id, k); /* the bytes of the ID that mark wrote */
    memcpy(&first, p, k);
    last = first;
    if (n >= 2 * sizeof(id))
        memcpy(&last, (const char *)p + n - sizeof(last), sizeof(last));
    if (first != want || last != want)
        fail_msg("allocation %llu (%zu bytes) at %p was overwritten "
                 "(%llu, %llu)", (unsigned long long)id, n, p,
                 (unsigned long long)first, (unsigned long long)last);
}

/* Replays the trace on a device of capacity bytes; returns the pool's
 * peak reserved bytes. */
static size_t replay(size_t capacity)
{
    tu_sim_only("the trace is replayed on a simulated device of its size");
    char conf[256];
    snprintf(conf, sizeof(conf),
             "backend:sim,sim_devices:1,sim_device_mem:%zu", capacity);
    ump_pool_t *pool = tu_pool_create(conf);
    void **ptr = calloc(nids, sizeof(*ptr));
    size_t *size = calloc(nids, sizeof(*size));
    assert_non_null(ptr);
    assert_non_null(size);
    for (size_t i = 0; i < nops; i++) {
        const struct op *o = &ops[i];
        if (o->bytes) {
            int rc = ump_alloc(pool, o->bytes, NULL, &ptr[o->id]);
            if (rc)
                fail_msg("operation %zu: ump_alloc(%zu) = %s", i + 1,
                         o->bytes, ump_strerror(rc));
            size[o->id] = o->bytes;
            mark(ptr[o->id], o->bytes, o->id);
        } else {
            expect_mark(ptr[o->id], size[o->id], o->id);
            tu_free(pool, ptr[o->id]);
            ptr[o->id] = NULL;
        }
    }
    ump_stats_t st = tu_stats(pool, UMP_DEVICE_ALL);
    for (size_t id = 0; id < nids; id++)
        if (ptr[id]) {
            expect_mark(ptr[id], size[id], id);
            tu_free(pool, ptr[id]);
        }
    free(ptr);
    free(size);
    tu_pool_destroy(pool);
    return st.peak_reserved_bytes;
}

static void test_footprint_at_3x(void **state)
{
    (void)state;
    size_t cap = (3 * peak_live + TU_CHUNK - 1) / TU_CHUNK * TU_CHUNK;
    size_t peak = replay(cap);
    double ratio = (double)peak / (double)peak_live;
    printf("peak live %zu MiB, peak reserved %zu MiB: %.3f\n",
           peak_live >> 20, peak >> 20, ratio);
    assert_true(peak >= peak_live);
    assert_true(ratio <= 1.05);
}

/* Tight: a device 3% above the peak still serves the whole trace (the
 * small sizes' slabs and the granule rounding need the margin): replay
 * fails the test at the first allocation refused. */
static void test_fits_at_103(void **state)
{
    (void)state;
    size_t cap = ((size_t)((double)peak_live * 1.03) + TU_CHUNK - 1) /
                 TU_CHUNK * TU_CHUNK;
    assert_true(replay(cap) >= peak_live);
}

int main(void)
{
    tu_main_begin("test_replay");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_footprint_at_3x),
        cmocka_unit_test(test_fits_at_103),
    };
    return tu_main_end(cmocka_run_group_tests_name("replay", tests, load,
                                                   unload),
                       2);
}
