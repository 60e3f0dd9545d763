/*
 * The statistics a pool publishes (lib/publish.c): the segment's name,
 * mode and life, what it says against ump_stats and ump_largest_allocs,
 * refreshes on request and in the background, consistent copies under
 * concurrent refreshes, fork; a segment scribbled on, shrunk or removed
 * by another process (the program goes on, unharmed); and the figures
 * stats.c adds (largest free block, fragmentation, the largest
 * allocations, a picture of many runs).
 */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "testutil.h"

#include "mem/pool.h"
#include "publish/snapshot.h"

#define CONF "backend:sim,sim_devices:2,sim_device_mem:64M"

#define MIB TU_MIB

static uint32_t pid_ns(void)
{
    uint32_t ns = 0;
    assert_int_equal(snap_pid_ns(&ns), 0);
    return ns;
}

/* The name a pool of this process publishes under. */
static void seg_path(ump_pool_t *pool, char *buf, size_t len)
{
    char name[96];
    struct snap_name sn = {(uint32_t)geteuid(), pid_ns(), (int32_t)getpid(),
                           pool->id};
    assert_int_equal(snap_name(name, sizeof(name), &sn), 0);
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
    uint32_t uid = (uint32_t)geteuid();
    struct snap_expect ex = {uid, uid, (int32_t)getpid(), 0, pid_ns()};
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
    assert_int_equal(st.st_uid, geteuid());
    struct snap_view v = read_seg(path);
    assert_int_equal(v.hdr->uid, geteuid());
    assert_int_equal(v.hdr->pid_ns, pid_ns());
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
        assert_int_equal(x->reserved_bytes, st.reserved_bytes);
        assert_int_equal(x->peak_reserved_bytes, st.peak_reserved_bytes);
        assert_int_equal(x->driver_ns, st.driver_ns);
        assert_true(x->reserved_bytes >= x->mapped_bytes);
        /* The picture accounts for every byte of the device. */
        uint64_t sum = 0;
        for (unsigned s = 0; s < SNAP_NSTATES; s++)
            sum += x->state_bytes[s];
        assert_int_equal(sum, st.capacity);
        /* 6 MiB on 0; 4 MiB of run and a 2 MiB slab on 1 */
        assert_true(x->state_bytes[SNAP_USED] >= 6 * MIB);
        assert_true(x->map_count >= 1);
    }
    /* The pool-wide figures that are not sums of the devices'. */
    ump_stats_t all = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(v.data->peak_bytes, all.peak_bytes);
    assert_int_equal(v.data->peak_reserved_bytes, all.peak_reserved_bytes);
    assert_int_equal(v.data->driver_ns, all.driver_ns);
    assert_int_equal(v.dev[0].reserved_bytes + v.dev[1].reserved_bytes,
                     all.reserved_bytes);
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

/* A pool shared by processes publishes its name and processes (here
 * the sharer alone), with the device memory each holds; an unshared
 * pool publishes none. */
static void test_shared_pool(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256], dir[64], cmd[128];
    seg_path(pool, path, sizeof(path));
    struct snap_view v = fresh(path);
    assert_string_equal(v.data->share_name, "");
    assert_int_equal(v.data->share_nproc, 0);
    snap_view_free(&v);
    /* The socket in a directory of this test's own. */
    snprintf(dir, sizeof(dir), "/tmp/umpool-pub-XXXXXX");
    assert_non_null(mkdtemp(dir));
    const char *old = getenv("XDG_RUNTIME_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("XDG_RUNTIME_DIR", dir, 1);
    assert_int_equal(ump_pool_share(pool, "pub-share"), 0);
    void *a = tu_alloc(pool, 6 * MIB, 0);
    v = fresh(path);
    assert_string_equal(v.data->share_name, "pub-share");
    assert_int_equal(v.data->share_nproc, 1);
    assert_int_equal(v.data->share_self, 0);
    assert_int_equal(v.data->share_proc[0].pid, getpid());
    assert_int_equal(v.data->share_proc[0].slot, 0);
    assert_int_equal(v.data->share_proc[0].bytes,
                     tu_stats(pool, UMP_DEVICE_ALL).reserved_bytes);
    snap_view_free(&v);
    tu_free(pool, a);
    tu_pool_destroy(pool);
    if (saved)
        setenv("XDG_RUNTIME_DIR", saved, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    free(saved);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
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
    uint32_t uid = (uint32_t)geteuid();
    struct snap_expect ex = {uid, uid, 0, 0, 0};
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
        int rc2 = ump_pool_create(TU_UNDER_TSAN ? CONF ",publish:false" : CONF,
                                  &mine);
        char p2[256] = "";
        if (!rc2)
            seg_path(mine, p2, sizeof(p2));
        bool ok = !rc && !rc2 && exists(path) && (TU_UNDER_TSAN || exists(p2));
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

/* ---- a segment others meddle with --------------------------------------- */

/* Asks the writer of the segment open on fd for a refresh as a reader
 * does, with system calls alone: the file may be shorter than a page. */
static void poke_fd(int fd)
{
    const off_t at = offsetof(struct snap_header, request);
    uint32_t r;
    if (pread(fd, &r, sizeof(r), at) == (ssize_t)sizeof(r)) {
        r++;
        assert_int_equal(pwrite(fd, &r, sizeof(r), at), sizeof(r));
    }
    void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    syscall(SYS_futex, (uint32_t *)((char *)m + at), FUTEX_WAKE, INT_MAX,
            NULL, NULL, 0);
    munmap(m, 4096);
}

/* The library's log lines (stderr) while a test runs. */
struct capture {
    int saved, fd;
};

static struct capture capture_start(void)
{
    char path[] = "/tmp/test_inspect_publish.XXXXXX";
    struct capture c = {dup(STDERR_FILENO), mkstemp(path)};
    assert_true(c.saved >= 0 && c.fd >= 0);
    unlink(path);
    fflush(stderr);
    assert_true(dup2(c.fd, STDERR_FILENO) >= 0);
    return c;
}

/* What was logged so far (free it). */
static char *capture_text(const struct capture *c)
{
    fflush(stderr);
    off_t len = lseek(c->fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(pread(c->fd, text, (size_t)len, 0), len);
    return text;
}

static char *capture_end(struct capture *c)
{
    char *text = capture_text(c);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    close(c->fd);
    return text;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        n++;
    return n;
}

/* Waits up to 3 s for the name to go; whether it went. */
static bool gone(const char *path)
{
    for (int i = 0; i < 300 && exists(path); i++)
        usleep(10 * 1000);
    return !exists(path);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Another process of the user rewrites the header's layout fields: the
 * writer keeps to the layout it made (it once sized its writes, and the
 * devices it read, by them: out of bounds). */
static void test_scribbled_header(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    struct mapped m = map_seg(path);
    struct snap_header saved;
    memcpy(&saved, m.h, sizeof(saved));
    m.h->total_size += MIB;
    m.h->header_size = 8;
    m.h->ndev = SNAP_MAX_DEVICES;
    m.h->max_allocs = SNAP_MAX_ALLOCS;
    m.h->map_cap = SNAP_MAX_MAP;
    void *p = tu_alloc(pool, 5 * MIB, 1);
    uint64_t seq = snap_seq(m.h);
    atomic_fetch_add(&m.h->request, 1);
    syscall(SYS_futex, (uint32_t *)&m.h->request, FUTEX_WAKE, INT_MAX, NULL,
            NULL, 0);
    for (int i = 0; i < 2000 && snap_seq(m.h) == seq; i++)
        usleep(1000);
    assert_int_not_equal(snap_seq(m.h), seq);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, m.len);
    /* Put the layout back: what the writer wrote meanwhile is whole. */
    const size_t seq_at = offsetof(struct snap_header, seq);
    const size_t after = offsetof(struct snap_header, header_size);
    memcpy(m.h, &saved, seq_at);
    memcpy((char *)m.h + after, (char *)&saved + after, sizeof(saved) - after);
    struct snap_view v = read_map(m);
    assert_int_equal(v.hdr->ndev, 2);
    assert_int_equal(v.data->nalloc, 1);
    assert_int_equal(v.alloc[0].size, 5 * MIB);
    assert_int_equal(v.alloc[0].device, 1);
    snap_view_free(&v);
    munmap(m.h, m.len);
    tu_free(pool, p);
    tu_pool_destroy(pool);
    assert_false(exists(path));
}

/* Another process shrinks the segment (to less than a page, then to
 * nothing): the writer, which would die of SIGBUS writing through a
 * mapping, stops publishing with one warning and removes its name; the
 * pool goes on, and its thread idles rather than spins. */
static void test_shrunk(void **state)
{
    (void)state;
    static const off_t sizes[] = {100, 0};
    for (size_t k = 0; k < 2; k++) {
        struct capture c = capture_start();
        ump_pool_t *pool = tu_pool_create(CONF);
        char path[256];
        seg_path(pool, path, sizeof(path));
        int fd = open(path, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, sizes[k]), 0);
        poke_fd(fd);
        assert_true(gone(path));
        void *p = tu_alloc(pool, 3 * MIB, 0);
        tu_free(pool, p);
        double cpu = cpu_seconds();
        usleep(500 * 1000);
        poke_fd(fd);
        usleep(100 * 1000);
        assert_true(cpu_seconds() - cpu < 0.2);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        assert_int_equal(st.st_size, sizes[k]); /* not written since */
        tu_pool_destroy(pool);
        close(fd);
        char *text = capture_end(&c);
        char want[64];
        snprintf(want, sizeof(want), "was resized to %lld bytes",
                 (long long)sizes[k]);
        if (count_of(text, "no longer published") != 1 || !strstr(text, want))
            fail_msg("logged: %s", text);
        free(text);
    }
}

/* Another process removes the segment and puts a file of its own under
 * the name: the writer stops publishing, and leaves that file alone (at
 * once and when the pool goes). */
static void test_removed_and_replaced(void **state)
{
    (void)state;
    struct capture c = capture_start();
    ump_pool_t *pool = tu_pool_create(CONF);
    char path[256];
    seg_path(pool, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(unlink(path), 0);
    int other = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(other >= 0);
    assert_int_equal(write(other, "other", 5), 5);
    close(other);
    poke_fd(fd);
    char *text = NULL;
    for (int i = 0; i < 300; i++) {
        free(text);
        text = capture_text(&c);
        if (strstr(text, "no longer published"))
            break;
        usleep(10 * 1000);
    }
    assert_non_null(strstr(text, "was removed by another process"));
    free(text);
    assert_true(exists(path));
    tu_pool_destroy(pool);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 5);
    assert_int_equal(unlink(path), 0);
    close(fd);
    text = capture_end(&c);
    assert_int_equal(count_of(text, "no longer published"), 1);
    free(text);
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

/* Hundreds of runs, every other one freed: more map entries than the
 * publisher first makes room for (it grows them outside the pool lock and
 * walks again), and the picture is still exact. */
static void test_many_runs(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create("backend:sim,sim_devices:1,"
                                      "sim_device_mem:512M,tcache:false");
    char path[256];
    seg_path(pool, path, sizeof(path));
    enum { N = 200, RUN = 2 * MIB }; /* the memory is never touched */
    void **p = calloc(N, sizeof(*p));
    assert_non_null(p);
    for (size_t i = 0; i < N; i++)
        p[i] = tu_alloc(pool, RUN, 0);
    for (size_t i = 1; i < N; i += 2)
        tu_free(pool, p[i]);
    struct snap_view v = fresh(path);
    const struct snap_device *x = &v.dev[0];
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(x->map_unit, pool->chunk_size); /* fits: exact */
    /* used, cached, used, ... then the free rest */
    assert_true(x->map_count >= N - 1);
    uint64_t bytes = 0, used = 0;
    for (uint32_t i = 0; i < x->map_count; i++) {
        const struct snap_map *e = &v.map[i];
        if (i < N - 1) {
            assert_int_equal(e->state, i % 2 ? SNAP_CACHED : SNAP_USED);
            assert_int_equal(e->units, RUN / pool->chunk_size);
        }
        bytes += e->units * x->map_unit;
        used += e->state == SNAP_USED ? e->units * x->map_unit : 0;
    }
    assert_int_equal(bytes, st.capacity);
    assert_int_equal(used, x->state_bytes[SNAP_USED]);
    assert_int_equal(x->state_bytes[SNAP_USED], N / 2 * RUN);
    uint64_t sum = 0;
    for (unsigned s = 0; s < SNAP_NSTATES; s++)
        sum += x->state_bytes[s];
    assert_int_equal(sum, st.capacity);
    assert_int_equal(v.data->nalloc, SNAP_ALLOCS);
    assert_int_equal(v.alloc[0].size, RUN);
    assert_int_equal(v.alloc[0].addr, (uintptr_t)p[0]);
    snap_view_free(&v);
    for (size_t i = 0; i < N; i += 2)
        tu_free(pool, p[i]);
    free(p);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment),
        cmocka_unit_test(test_publish_off),
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_shared_pool),
        cmocka_unit_test(test_background),
        cmocka_unit_test(test_busy_destroy),
        cmocka_unit_test(test_consistent),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_scribbled_header),
        cmocka_unit_test(test_shrunk),
        cmocka_unit_test(test_removed_and_replaced),
        cmocka_unit_test(test_many_runs),
        cmocka_unit_test(test_largest_allocs),
        cmocka_unit_test(test_fragmentation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
