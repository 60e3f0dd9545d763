/*
 * The statistics a pool publishes (lib/publish.c): the segment's name,
 * mode and life, what it says against ump_stats and ump_largest_allocs,
 * refreshes on request and in the background, consistent copies under
 * concurrent refreshes, fork; and the figures stats.c adds (largest free
 * block, fragmentation, the largest allocations).
 */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "testutil.h"

#include "pool.h"
#include "snapshot.h"

#define CONF "backend:sim,sim_devices:2,sim_device_mem:64M"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#define MIB TU_MIB

static void seg_path(ump_pool_t *pool, char *buf, size_t len)
{
    char name[96];
    assert_int_equal(snap_name(name, sizeof(name), (uint32_t)getuid(),
                               (int32_t)getpid(), pool->id),
                     0);
    snprintf(buf, len, SNAP_DIR "/%s", name);
}

struct mapped {
    struct snap_header *h;
    size_t len;
};

static struct mapped map_seg(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        fail_msg("%s: %s", path, strerror(errno));
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    return (struct mapped){m, (size_t)st.st_size};
}

/* A consistent, checked copy of the segment. */
static struct snap_view read_map(struct mapped m)
{
    char *buf = malloc(m.len);
    assert_non_null(buf);
    int rc = -EAGAIN;
    for (int i = 0; i < 1000 && rc == -EAGAIN; i++)
        if ((rc = snap_copy(m.h, m.len, buf)) == -EAGAIN)
            usleep(1000);
    assert_int_equal(rc, 0);
    struct snap_view v;
    char err[256];
    uint32_t uid = (uint32_t)getuid();
    struct snap_expect ex = {uid, uid, (int32_t)getpid(), 0};
    rc = snap_parse(buf, m.len, &ex, &v, err, sizeof(err));
    if (rc)
        fail_msg("snap_parse: %s", err);
    free(buf);
    return v;
}

static struct snap_view read_seg(const char *path)
{
    struct mapped m = map_seg(path);
    struct snap_view v = read_map(m);
    munmap(m.h, m.len);
    return v;
}

/* Asks for a refresh as umpool-inspect does and waits for it (2 s). */
static struct snap_view fresh(const char *path)
{
    struct mapped m = map_seg(path);
    uint64_t seq = snap_seq(m.h);
    atomic_fetch_add(&m.h->request, 1);
    syscall(SYS_futex, (uint32_t *)&m.h->request, FUTEX_WAKE, INT_MAX, NULL,
            NULL, 0);
    for (int i = 0; i < 2000 && snap_seq(m.h) == seq; i++)
        usleep(1000);
    assert_int_not_equal(snap_seq(m.h), seq);
    struct snap_view v = read_map(m);
    munmap(m.h, m.len);
    return v;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_segment(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_uid, getuid());
    struct snap_view v = read_seg(path);
    assert_int_equal(v.hdr->ndev, 2);
    assert_int_equal(v.hdr->pool_id, pool->id);
    assert_string_equal(v.hdr->backend, "sim");
    assert_true(v.data->generation >= 1);
    uint64_t start;
    assert_int_equal(snap_proc_start(getpid(), &start), 0);
    assert_int_equal(v.hdr->pid_start, start);
    for (uint32_t d = 0; d < 2; d++)
        assert_int_equal(v.dev[d].capacity, 64 * MIB);
    snap_view_free(&v);
    /* No half-made segment is left behind. */
    char hidden[300];
    snprintf(hidden, sizeof(hidden), SNAP_DIR "/.%s",
             path + strlen(SNAP_DIR) + 1);
    assert_false(exists(hidden));
    tu_pool_destroy(pool);
    assert_false(exists(path));
}

static void test_publish_off(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF ",publish:false");
    char path[256];
    seg_path(pool, path, sizeof(path));
    assert_false(exists(path));
    tu_pool_destroy(pool);
}

/* What the snapshot says is what the API says. */
static void test_figures(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    void *a = tu_alloc(pool, 6 * MIB, 0);
    void *b = tu_alloc(pool, 3 * MIB + 5, 1);
    void *c = tu_alloc(pool, 4000, 1); /* a slab object: not listed */
    struct snap_view v = fresh(path);
    for (int d = 0; d < 2; d++) {
        ump_stats_t st = tu_stats(pool, d);
        const struct snap_device *x = &v.dev[d];
        assert_int_equal(x->live_bytes, st.live_bytes);
        assert_int_equal(x->live_count, st.live_count);
        assert_int_equal(x->mapped_bytes, st.mapped_bytes);
        assert_int_equal(x->cached_bytes, st.cached_bytes);
        assert_int_equal(x->alloc_count, st.alloc_count);
        /* The picture accounts for every byte of the device. */
        uint64_t sum = 0;
        for (unsigned s = 0; s < SNAP_NSTATES; s++)
            sum += x->state_bytes[s];
        assert_int_equal(sum, st.capacity);
        /* 6 MiB on 0; 4 MiB of run and a 2 MiB slab on 1 */
        assert_true(x->state_bytes[SNAP_USED] >= 6 * MIB);
        assert_true(x->map_count >= 1);
    }
    assert_int_equal(v.data->nalloc, 2);
    assert_int_equal(v.alloc[0].addr, (uintptr_t)a);
    assert_int_equal(v.alloc[0].size, 6 * MIB);
    assert_int_equal(v.alloc[0].device, 0);
    assert_int_equal(v.alloc[1].addr, (uintptr_t)b);
    assert_int_equal(v.alloc[1].size, 3 * MIB + 5);
    assert_int_equal(v.alloc[1].device, 1);
    assert_int_equal(v.alloc[1].tier, UMP_TIER_DEVICE);
    uint64_t gen = v.data->generation;
    snap_view_free(&v);
    tu_free(pool, a);
    tu_free(pool, b);
    tu_free(pool, c);
    v = fresh(path);
    assert_true(v.data->generation > gen);
    assert_int_equal(v.data->nalloc, 0);
    assert_int_equal(v.dev[0].live_count + v.dev[1].live_count, 0);
    snap_view_free(&v);
    tu_pool_destroy(pool);
}

/* Nobody asks: the thread still refreshes, about once a second. */
static void test_background(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    struct snap_view v = read_seg(path);
    uint64_t gen = v.data->generation;
    snap_view_free(&v);
    void *p = tu_alloc(pool, 2 * MIB, 0);
    usleep(1600 * 1000);
    v = read_seg(path);
    assert_true(v.data->generation > gen);
    assert_int_equal(v.data->nalloc, 1);
    snap_view_free(&v);
    tu_free(pool, p);
    tu_pool_destroy(pool);
}

/* A pool that refuses to go (live allocations) keeps publishing. */
static void test_busy_destroy(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF ",log_level:error");
    char path[256];
    seg_path(pool, path, sizeof(path));
    void *p = tu_alloc(pool, 2 * MIB, 0);
    assert_int_equal(ump_pool_destroy(pool), -EBUSY);
    assert_true(exists(path));
    struct snap_view v = fresh(path);
    assert_int_equal(v.data->nalloc, 1);
    snap_view_free(&v);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_false(exists(path));
}

struct hammer {
    const char *path;
    _Atomic bool stop;
    int copies, bad;
};

static void *reader(void *arg)
{
    struct hammer *h = arg;
    int fd = open(h->path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        h->bad++;
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    struct snap_header *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                                 MAP_SHARED, fd, 0);
    close(fd);
    char *buf = malloc(len);
    uint32_t uid = (uint32_t)getuid();
    struct snap_expect ex = {uid, uid, 0, 0};
    while (m != MAP_FAILED && buf && !atomic_load(&h->stop)) {
        atomic_fetch_add(&m->request, 1);
        syscall(SYS_futex, (uint32_t *)&m->request, FUTEX_WAKE, INT_MAX,
                NULL, NULL, 0);
        if (snap_copy(m, len, buf))
            continue;
        struct snap_view v;
        char err[256];
        if (snap_parse(buf, len, &ex, &v, err, sizeof(err))) {
            h->bad++;
            continue;
        }
        h->copies++;
        snap_view_free(&v);
    }
    free(buf);
    if (m != MAP_FAILED)
        munmap(m, len);
    return NULL;
}

/* Copies taken while refreshes run are whole: the seqlock works. */
static void test_consistent(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    struct hammer h = {.path = path};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, reader, &h), 0);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    void *p[8] = {0};
    for (unsigned i = 0;; i++) {
        size_t k = i % 8;
        if (p[k])
            tu_free(pool, p[k]);
        p[k] = tu_alloc(pool, (1 + i % 5) * MIB, (int)(i % 2));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= 1 && now.tv_nsec >= t0.tv_nsec)
            break;
    }
    atomic_store(&h.stop, true);
    pthread_join(t, NULL);
    for (size_t k = 0; k < 8; k++)
        if (p[k])
            tu_free(pool, p[k]);
    assert_int_equal(h.bad, 0);
    assert_true(h.copies > 5);
    tu_pool_destroy(pool);
}

/* A child's copy of the pool is the parent's: destroying it there
 * leaves the parent's segment alone. */
static void test_fork(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int rc = ump_pool_destroy(pool);
        ump_pool_t *mine = NULL;
        /* A pool made in the child publishes under the child's pid (its
         * thread: not under TSan, which forbids threads after a fork of a
         * process that has some). */
        int rc2 = ump_pool_create(UNDER_TSAN ? CONF ",publish:false" : CONF,
                                  &mine);
        char p2[256] = "";
        if (!rc2) {
            char name[96];
            snap_name(name, sizeof(name), (uint32_t)getuid(),
                      (int32_t)getpid(), mine->id);
            snprintf(p2, sizeof(p2), SNAP_DIR "/%s", name);
        }
        bool ok = !rc && !rc2 && exists(path) && (UNDER_TSAN || exists(p2));
        if (!rc2)
            ump_pool_destroy(mine);
        _exit(ok && !exists(p2) ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(exists(path));
    struct snap_view v = fresh(path); /* our thread still answers */
    snap_view_free(&v);
    tu_pool_destroy(pool);
    assert_false(exists(path));
}

/* ---- stats.c ---------------------------------------------------------- */

static void test_largest_allocs(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    void *a = tu_alloc(pool, 3 * MIB, 1);
    void *b = tu_alloc(pool, 8 * MIB, 0);
    void *c = tu_alloc(pool, 5 * MIB, 0);
    void *s = tu_alloc(pool, 1000, 0);
    ump_hints_t h = tu_hints(1);
    h.flags = UMP_HINT_NO_SPILL;
    void *d = NULL;
    assert_int_equal(ump_alloc(pool, 2 * MIB, &h, &d), 0);
    ump_alloc_info_t out[8];
    size_t n = 99;
    assert_int_equal(ump_largest_allocs(pool, UMP_DEVICE_ALL, out, 8, &n), 0);
    assert_int_equal(n, 4);
    void *order[] = {b, c, a, d};
    size_t sizes[] = {8 * MIB, 5 * MIB, 3 * MIB, 2 * MIB};
    for (size_t i = 0; i < 4; i++) {
        assert_ptr_equal(out[i].ptr, order[i]);
        assert_int_equal(out[i].size, sizes[i]);
        assert_int_equal(out[i].ndevices, 1);
        assert_int_equal(out[i].tier, UMP_TIER_DEVICE);
        assert_true(out[i].age_s >= 0);
    }
    assert_int_equal(out[3].flags, UMP_HINT_NO_SPILL);
    assert_int_equal(out[0].flags, 0);
    assert_int_equal(ump_largest_allocs(pool, 1, out, 8, &n), 0);
    assert_int_equal(n, 2);
    assert_ptr_equal(out[0].ptr, a);
    assert_int_equal(out[0].device, 1);
    assert_int_equal(ump_largest_allocs(pool, UMP_DEVICE_ALL, out, 2, &n), 0);
    assert_int_equal(n, 2);
    assert_ptr_equal(out[0].ptr, b);
    assert_ptr_equal(out[1].ptr, c);
    assert_int_equal(ump_largest_allocs(pool, 0, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
    /* Ages run in tenths of a second from the allocation. */
    usleep(350 * 1000);
    assert_int_equal(ump_largest_allocs(pool, 0, out, 1, &n), 0);
    assert_true(out[0].age_s >= 0.2 && out[0].age_s < 60);
    assert_int_equal(ump_largest_allocs(pool, 0, out, 1, NULL), -EINVAL);
    assert_int_equal(ump_largest_allocs(pool, 0, NULL, 1, &n), -EINVAL);
    assert_int_equal(ump_largest_allocs(pool, 2, out, 1, &n), -EINVAL);
    assert_int_equal(ump_largest_allocs(NULL, 0, out, 1, &n), -EINVAL);
    void *all[] = {a, b, c, d, s};
    for (size_t i = 0; i < 5; i++)
        tu_free(pool, all[i]);
    assert_int_equal(ump_largest_allocs(pool, UMP_DEVICE_ALL, out, 8, &n), 0);
    assert_int_equal(n, 0);
    tu_pool_destroy(pool);
}

/* Two cached blocks of 3 and 1 chunks: the largest is 6 MiB of 8. */
static void test_fragmentation(void **state)
{
    (void)state;
    /* No thread cache, and RUN_PARK_MAX runs parked first: the next
     * frees become cached blocks. */
    ump_pool_t *pool = tu_pool_create(CONF ",tcache:false");
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.largest_free, 0);
    assert_true(st.fragmentation == 0.0);
    void *park[RUN_PARK_MAX];
    for (size_t i = 0; i < RUN_PARK_MAX; i++)
        park[i] = tu_alloc(pool, 2 * MIB, 0);
    void *x = tu_alloc(pool, 6 * MIB, 0);
    void *sep = tu_alloc(pool, 2 * MIB, 0);
    void *y = tu_alloc(pool, 2 * MIB, 0);
    void *end = tu_alloc(pool, 2 * MIB, 0);
    for (size_t i = 0; i < RUN_PARK_MAX; i++)
        tu_free(pool, park[i]);
    tu_free(pool, x);
    tu_free(pool, y);
    st = tu_stats(pool, 0);
    assert_int_equal(st.largest_free, 6 * MIB);
    assert_true(st.fragmentation > 0.2499 && st.fragmentation < 0.2501);
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(all.largest_free, 6 * MIB);
    assert_true(all.fragmentation > 0.2499 && all.fragmentation < 0.2501);
    ump_stats_t other = tu_stats(pool, 1);
    assert_int_equal(other.largest_free, 0);
    tu_free(pool, sep);
    tu_free(pool, end);
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.largest_free, 0);
    assert_true(st.fragmentation == 0.0);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment),
        cmocka_unit_test(test_publish_off),
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_background),
        cmocka_unit_test(test_busy_destroy),
        cmocka_unit_test(test_consistent),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_largest_allocs),
        cmocka_unit_test(test_fragmentation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
