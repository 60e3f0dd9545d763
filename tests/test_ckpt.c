/*
 * Checkpoint and restore (ump_pool_checkpoint, ump_pool_restore) and
 * suspend/resume (ump_pool_suspend, ump_pool_resume) on the sim backend.
 *
 * A workload puts allocations everywhere a pool can hold them: slab objects
 * on each device, runs on one device and across all of them, pinned host
 * memory, offloadable runs moved to the host tier and to NVMe (whole and in
 * part), and one advised DONTNEED then moved to NVMe (its data dropped).
 * Each allocation's first 8 bytes point to the next one, the rest is a
 * pattern: after a restore every byte is checked and the chain followed,
 * in a fresh process (fork + exec of this program) and in this one.
 */
#include "config.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "testutil.h"

#include "front/ckpt.h"
#include "front/ckpt_format.h"
#include "util/crc32c.h"
#include "tier/offload.h"
#include "mem/chunks.h"
#include "mem/runs.h"
#include "mem/sizeclass.h"
#include "mem/slab.h"
#include "tier/tier.h"

#define MIB TU_MIB
#define NITEMS_MAX 128
#define NDEV 4


static const char *self; /* argv[0], for the fresh process */
static char dir[64];     /* spill directory and checkpoint files */

/* One allocation of the workload. */
struct item {
    void *p;
    size_t size;
    uint64_t seed;
    int kind;     /* UMP_KIND_* */
    int nodata;   /* its bytes were dropped (DONTNEED) */
    void *next;   /* what its first 8 bytes hold */
};

struct load {
    struct item it[NITEMS_MAX];
    size_t n;
};

static void conf(char *buf, size_t len, const char *extra)
{
    snprintf(buf, len,
             "backend:sim,sim_devices:%d,sim_device_mem:96M,chunk_size:2M,"
             "max_chunk:8M,host_reserve:0,host_limit:256M,pinned_limit:32M,"
             "nvme_dir:%s,publish:false%s%s",
             NDEV, dir, extra ? "," : "", extra ? extra : "");
}

static ump_pool_t *make_pool(const char *extra)
{
    char c[512];
    ump_pool_t *pool = NULL;
    conf(c, sizeof(c), extra);
    expect_rc(ump_pool_create(c, &pool), 0);
    return pool;
}

static void add(struct load *l, void *p, size_t size, int kind)
{
    assert_true(l->n < NITEMS_MAX);
    l->it[l->n++] = (struct item){.p = p, .size = size,
                                  .seed = 1000 + l->n, .kind = kind};
}

/* Writes every item: pattern from byte 8, the chain in bytes 0..7. The
 * pool's memory is the CPU's on sim; items on NVMe are acquired first. */
static void fill(ump_pool_t *pool, struct load *l)
{
    for (size_t i = 0; i < l->n; i++) {
        struct item *it = &l->it[i];
        it->next = l->it[(i + 1) % l->n].p;
        tu_fill((char *)it->p + 8, it->size - 8, it->seed);
        memcpy(it->p, &it->next, sizeof(it->next));
    }
    (void)pool;
}

/* Every item's bytes (those not dropped), each one reached through the
 * chain stored in the data; NVMe items are acquired to be read. */
static void verify(ump_pool_t *pool, const struct load *l)
{
    void *p = l->it[0].p;
    for (size_t i = 0; i < l->n; i++) {
        const struct item *it = &l->it[i];
        assert_ptr_equal(p, it->p); /* the chain leads here */
        ump_ptr_info_t info = tu_info(pool, it->p);
        assert_ptr_equal(info.base, it->p);
        assert_int_equal(info.size, it->size);
        assert_int_equal(info.kind, it->kind);
        bool acquired = false;
        if (!it->nodata && info.tier == UMP_TIER_NVME) {
            expect_rc(ump_acquire(pool, it->p, 0, 0, NULL), 0);
            acquired = true;
        }
        if (!it->nodata) {
            memcpy(&p, it->p, sizeof(p));
            assert_ptr_equal(p, it->next);
            tu_assert_pattern((char *)it->p + 8, it->size - 8, it->seed);
        } else {
            p = it->next;
        }
        if (acquired)
            expect_rc(ump_release(pool, it->p, 0), 0);
    }
}

static void free_all(ump_pool_t *pool, const struct load *l)
{
    for (size_t i = 0; i < l->n; i++)
        expect_rc(l->it[i].kind == UMP_KIND_HOST
                      ? ump_host_free(pool, l->it[i].p)
                      : ump_free(pool, l->it[i].p),
                  0);
}

static void *alloc_hinted(ump_pool_t *pool, size_t size, int dev,
                          const char *policy, unsigned flags)
{
    ump_hints_t h = tu_hints(dev);
    h.policy = policy;
    h.flags = flags;
    void *p = NULL;
    expect_rc(ump_alloc(pool, size, &h, &p), 0);
    return p;
}

/* The workload (see the top of the file). */
static void populate(ump_pool_t *pool, struct load *l)
{
    l->n = 0;
    for (int i = 0; i < 40; i++) /* slab objects, every device */
        add(l, tu_alloc(pool, 64 + (size_t)i * 1000, i % NDEV),
            64 + (size_t)i * 1000, UMP_KIND_DEVICE);
    add(l, tu_alloc(pool, 3 * MIB, 1), 3 * MIB, UMP_KIND_DEVICE);
    add(l, alloc_hinted(pool, 16 * MIB, 0, "interleave", 0), 16 * MIB,
        UMP_KIND_DEVICE); /* spans the devices */
    void *h1, *h2;
    expect_rc(ump_host_alloc(pool, 100 * 1024, &h1), 0);
    expect_rc(ump_host_alloc(pool, 5 * MIB, &h2), 0);
    add(l, h1, 100 * 1024, UMP_KIND_HOST);
    add(l, h2, 5 * MIB, UMP_KIND_HOST);
    void *o_host = alloc_hinted(pool, 8 * MIB, 2, NULL, UMP_HINT_OFFLOAD);
    void *o_nvme = alloc_hinted(pool, 6 * MIB, 3, NULL, UMP_HINT_OFFLOAD);
    void *o_part = alloc_hinted(pool, 6 * MIB, 1, NULL, UMP_HINT_OFFLOAD);
    void *o_drop = alloc_hinted(pool, 4 * MIB, 0, NULL, UMP_HINT_OFFLOAD);
    add(l, o_host, 8 * MIB, UMP_KIND_DEVICE);
    add(l, o_nvme, 6 * MIB, UMP_KIND_DEVICE);
    add(l, o_part, 6 * MIB, UMP_KIND_DEVICE);
    add(l, o_drop, 4 * MIB, UMP_KIND_DEVICE);
    l->it[l->n - 1].nodata = 1;
    fill(pool, l);
    expect_rc(ump_evict(pool, o_host, 0, UMP_TIER_HOST), 0);
    expect_rc(ump_evict(pool, o_nvme, 0, UMP_TIER_NVME), 0);
    expect_rc(ump_evict(pool, o_part, 2 * MIB, UMP_TIER_NVME), 0);
    expect_rc(ump_advise(pool, o_drop, 0, UMP_ADVISE_DONTNEED), 0);
    expect_rc(ump_evict(pool, o_drop, 0, UMP_TIER_NVME), 0);
    assert_int_equal(tu_info(pool, o_nvme).tier, UMP_TIER_NVME);
    assert_int_equal(tu_info(pool, o_host).tier, UMP_TIER_HOST);
    assert_int_equal(tu_info(pool, o_part).tier, UMP_TIER_NVME);
}

static size_t live_bytes(ump_pool_t *pool)
{
    return tu_stats(pool, UMP_DEVICE_ALL).live_bytes +
           tu_stats(pool, UMP_LOC_HOST).live_bytes;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* The restored pool holds exactly the workload: the same bytes, the chain,
 * the live bytes; then everything frees and the pool goes. */
static void check_restored(ump_pool_t *pool, const struct load *l,
                           size_t live)
{
    verify(pool, l);
    assert_int_equal(live_bytes(pool), live);
    free_all(pool, l);
    tu_pool_destroy(pool);
}

/* A pool with the workload, checkpointed to dir/name (its path into ck),
 * then freed and destroyed: its live bytes. */
static size_t saved_workload(struct load *l, const char *name, char *ck,
                             size_t len)
{
    ump_pool_t *pool = make_pool(NULL);
    populate(pool, l);
    size_t live = live_bytes(pool);
    path_of(ck, len, name);
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    free_all(pool, l);
    tu_pool_destroy(pool);
    return live;
}

/* ---- the fresh process ------------------------------------------------- */

/* Child mode (argv: self --child ckpt loadfile config): one test, the
 * restore in this fresh process matching what the parent wrote. */
static const char *child_args[3];

static void test_child(void **state)
{
    (void)state;
    static struct load l;
    size_t live;
    FILE *f = fopen(child_args[1], "rb");
    assert_non_null(f);
    assert_int_equal(fread(&l, sizeof(l), 1, f), 1);
    assert_int_equal(fread(&live, sizeof(live), 1, f), 1);
    fclose(f);
    ump_pool_t *pool = NULL;
    expect_rc(ump_pool_restore(child_args[0], child_args[2], &pool), 0);
    check_restored(pool, &l, live);
}

static void test_fresh_process(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    size_t live = live_bytes(pool);
    char ck[128], lf[128];
    path_of(ck, sizeof(ck), "fresh.ckpt");
    path_of(lf, sizeof(lf), "fresh.load");
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    verify(pool, &l); /* the checkpoint changed nothing */
    FILE *f = fopen(lf, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&l, sizeof(l), 1, f), 1);
    assert_int_equal(fwrite(&live, sizeof(live), 1, f), 1);
    fclose(f);
    char c[512];
    conf(c, sizeof(c), NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self, self, "--child", ck, lf, c, (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    unlink(ck);
    unlink(lf);
}

/* In this process: the old pool destroyed, its range is free again. */
static void test_same_process(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    size_t live = live_bytes(pool);
    char ck[128];
    path_of(ck, sizeof(ck), "same.ckpt");
    int outside;
    expect_rc(ump_pool_set_root(pool, &outside), -EINVAL);
    expect_rc(ump_pool_set_root(pool, l.it[5].p), 0);
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    /* While it lives, its range is taken: no pool, a clear error. */
    ump_pool_t *again = (ump_pool_t *)0x1;
    expect_rc(ump_pool_restore(ck, NULL, &again), -EADDRINUSE);
    assert_ptr_equal(again, (ump_pool_t *)0x1);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    void *root = NULL;
    expect_rc(ump_pool_root(pool, &root), 0);
    assert_ptr_equal(root, l.it[5].p); /* the way back into the data */
    /* A restored pool checkpoints and restores again, the same. */
    char ck2[128];
    path_of(ck2, sizeof(ck2), "same2.ckpt");
    verify(pool, &l);
    expect_rc(ump_pool_checkpoint(pool, ck2), 0);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    expect_rc(ump_pool_restore(ck2, NULL, &pool), 0);
    check_restored(pool, &l, live);
    unlink(ck);
    unlink(ck2);
}

/* Fewer devices: the allocations of the missing ones are placed by the
 * policy, at their addresses; too little memory: -ENOSPC, no pool. */
static void test_smaller_machine(void **state)
{
    (void)state;
    static struct load l;
    char ck[128];
    size_t live = saved_workload(&l, "small.ckpt", ck, sizeof(ck));
    ump_pool_t *pool;

    pool = NULL;
    expect_rc(ump_pool_restore(ck, "sim_devices:2", &pool), 0);
    assert_int_equal(ump_device_count(pool), 2);
    for (size_t i = 0; i < l.n; i++) {
        ump_ptr_info_t info = tu_info(pool, l.it[i].p);
        assert_true(info.device < 2);
    }
    check_restored(pool, &l, live);

    /* One device of 16 MiB, a small host tier, no NVMe: it cannot fit. */
    pool = (ump_pool_t *)0x1;
    expect_rc(ump_pool_restore(ck, "sim_devices:1,sim_device_mem:16M,"
                                   "host_limit:4M,nvme_dir:",
                               &pool),
              -ENOSPC);
    assert_ptr_equal(pool, (ump_pool_t *)0x1);
    /* Nothing was left behind: the full restore still works. */
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    check_restored(pool, &l, live);
    unlink(ck);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void copy_file(const char *from, const char *to, off_t truncate_at,
                      off_t flip_at)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT |
                                                      O_TRUNC, 0600);
    assert_true(in >= 0 && out >= 0);
    char buf[1 << 16];
    off_t at = 0;
    for (ssize_t k; (k = read(in, buf, sizeof(buf))) > 0; at += k) {
        if (flip_at >= at && flip_at < at + k)
            buf[flip_at - at] ^= 0x5a;
        assert_int_equal(write(out, buf, (size_t)k), k);
    }
    close(in);
    if (truncate_at >= 0)
        assert_int_equal(ftruncate(out, truncate_at), 0);
    close(out);
}

/* A file cut anywhere or with a byte flipped in the header, the index or
 * the data: -EIO or -EINVAL, never a crash, never a pool. */
static void test_corrupt_files(void **state)
{
    (void)state;
    static struct load l;
    char ck[128], bad[128];
    saved_workload(&l, "good.ckpt", ck, sizeof(ck));
    path_of(bad, sizeof(bad), "bad.ckpt");
    ump_pool_t *pool;
    struct stat st;
    assert_int_equal(stat(ck, &st), 0);
    uint64_t seed = 88172645463325252ull;
    /* Where the bytes mean something: the header block, the index (the
     * 4 KiB after it), the data (the last part of the file). */
    struct ckpt_header h;
    int fd = open(ck, O_RDONLY);
    assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
    assert_int_equal((uint64_t)st.st_size, h.data_off + h.nblocks * h.granule);
    off_t data = (off_t)h.data_off;
    for (int i = 0; i < 60; i++) {
        off_t cut = -1, flip = -1;
        if (i < 20) {
            cut = (off_t)(rnd(&seed) % (uint64_t)st.st_size);
        } else {
            int region = i % 3;
            flip = region == 0   ? (off_t)(rnd(&seed) % 4096)
                   : region == 1 ? 4096 + (off_t)(rnd(&seed) % h.index_len)
                                 : data + (off_t)(rnd(&seed) %
                                                  (uint64_t)(st.st_size -
                                                             data));
        }
        copy_file(ck, bad, cut, flip);
        pool = (ump_pool_t *)0x1;
        int rc = ump_pool_restore(bad, NULL, &pool);
        if (rc != -EIO && rc != -EINVAL)
            fail_msg("cut %lld flip %lld: restore = %d (%s)", (long long)cut,
                     (long long)flip, rc, ump_strerror(rc));
        assert_ptr_equal(pool, (ump_pool_t *)0x1);
    }
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0); /* nothing held */
    verify(pool, &l);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    unlink(ck);
    unlink(bad);
}

static uint32_t file_crc(const char *path)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    uint32_t h = 2166136261u;
    unsigned char buf[1 << 16];
    for (ssize_t k; (k = read(fd, buf, sizeof(buf))) > 0;)
        for (ssize_t i = 0; i < k; i++)
            h = (h ^ buf[i]) * 16777619u;
    close(fd);
    return h;
}

/* Files in dir whose name starts with prefix. */
static int count_files(const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* The disk failing under a checkpoint (the file's own writes, and reads
 * of the NVMe tier): an error, the old checkpoint intact, no temporary
 * file left, the pool unchanged. */
static void test_checkpoint_faults(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    char ck[128];
    path_of(ck, sizeof(ck), "keep.ckpt");
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    uint32_t before = file_crc(ck);
    const char *kinds[] = {"eio", "enospc", "short_write"};
    for (int k = 0; k < 3; k++)
        for (int nth = 1; nth <= 9; nth += 4) {
            expect_rc(ckpt_inject_fault(kinds[k], nth), 0);
            int rc = ump_pool_checkpoint(pool, ck);
            if (!strcmp(kinds[k], "short_write"))
                assert_true(rc == 0 || rc == -EIO);
            else
                assert_true(rc < 0);
            if (rc == 0) /* a short write retried whole: a good file */
                before = file_crc(ck);
            assert_int_equal(file_crc(ck), before);
            assert_int_equal(count_files("keep.ckpt.tmp"), 0);
        }
    /* The pool's NVMe tier failing while its data is copied out. */
    expect_rc(offload_inject_fault(pool, "eio", 1), 0);
    assert_true(ump_pool_checkpoint(pool, ck) < 0);
    expect_rc(offload_inject_fault(pool, "eio", 0), 0);
    assert_int_equal(file_crc(ck), before);
    assert_int_equal(count_files("keep.ckpt.tmp"), 0);
    verify(pool, &l);
    /* A path in a directory that does not exist: a clear error too. */
    assert_true(ump_pool_checkpoint(pool, "/nonexistent/x.ckpt") < 0);
    expect_rc(ump_pool_checkpoint(pool, NULL), -EINVAL);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    unlink(ck);
}

/* ---- suspend and resume ------------------------------------------------ */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* 100 cycles, alternating the tiers: every byte back each time, the
 * devices empty while suspended, and nothing left over after. */
static void test_suspend_cycles(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    l.it[l.n - 1].nodata = 1;
    size_t live = live_bytes(pool);
    verify(pool, &l); /* its acquires bring NVMe items up: before h0/n0 */
    ump_tier_stats_t h0, n0, h1, n1;
    expect_rc(ump_tier_stats(pool, UMP_TIER_HOST, &h0), 0);
    expect_rc(ump_tier_stats(pool, UMP_TIER_NVME, &n0), 0);
    int fds = count_fds();
    for (int i = 0; i < 100; i++) {
        int tier = i % 2 ? UMP_TIER_NVME : UMP_TIER_HOST;
        expect_rc(ump_pool_suspend(pool, tier), 0);
        for (int d = 0; d < NDEV; d++)
            assert_int_equal(tu_stats(pool, d).reserved_bytes, 0);
        assert_int_equal(live_bytes(pool), live);
        /* The tier holds what came down, slab chunks too: at least one
         * chunk per slab object's device, and the runs. */
        ump_tier_stats_t now;
        expect_rc(ump_tier_stats(pool, tier, &now), 0);
        assert_true(now.used_bytes >= (tier == UMP_TIER_HOST ? h0 : n0)
                                              .used_bytes +
                                          (NDEV * 2 + 3 + 16) * MIB);
        expect_rc(ump_pool_resume(pool), 0);
        if (i % 10 == 0 || i == 99)
            verify(pool, &l);
    }
    expect_rc(ump_tier_stats(pool, UMP_TIER_HOST, &h1), 0);
    expect_rc(ump_tier_stats(pool, UMP_TIER_NVME, &n1), 0);
    /* What was on the tiers before stays there (the pool may have moved
     * some from the host tier to NVMe for room): nothing more, nothing
     * less. */
    assert_int_equal(h1.used_bytes + n1.used_bytes,
                     h0.used_bytes + n0.used_bytes);
    assert_int_equal(count_fds(), fds);
    assert_int_equal(live_bytes(pool), live);
    free_all(pool, &l);
    tu_pool_destroy(pool);
}

/* Carved memory (mem/chunks.h): runs and slabs that share the chunks of
 * a freed 32 MiB run on device 0, the rest of the device full. A
 * checkpoint restores them whole; a suspend moves the rest down, then
 * gives each carved one a chunk of its own (nothing runs meanwhile) and
 * moves it down, the device empty; a resume brings every byte back. */
static void test_carved(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool("max_chunk:32M,warm_chunk:32M,tcache:false");
    static struct load l;
    l.n = 0;
    char *big = tu_alloc(pool, 32 * MIB, 0);
    assert_int_equal(tu_info(pool, big).chunk_size, 32 * MIB);
    tu_free(pool, big);
    add(&l, tu_alloc(pool, 10 * MIB, 0), 10 * MIB, UMP_KIND_DEVICE);
    void *mid = tu_alloc(pool, 7 * MIB, 0);
    add(&l, tu_alloc(pool, 9 * MIB, 0), 9 * MIB, UMP_KIND_DEVICE);
    /* A hole for slabs, which carve too: a freed run is parked whole
     * until a trim (or a run of its size) takes it; the chunk, shared
     * with live runs, stays. */
    tu_free(pool, mid);
    expect_rc(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).cached_bytes, 12 * MIB);
    for (int i = 0; i < 4; i++)
        add(&l, tu_alloc(pool, 3000 + (size_t)i * 70000, 0),
            3000 + (size_t)i * 70000, UMP_KIND_DEVICE);
    for (size_t i = 0; i < l.n; i++) { /* all in the one chunk */
        ump_ptr_info_t info = tu_info(pool, l.it[i].p);
        assert_ptr_equal(info.chunk_base, big);
        assert_int_equal(info.chunk_size, 32 * MIB);
    }
    /* and the device full: giving them chunks of their own needs room,
     * which the suspend makes first */
    add(&l, tu_alloc(pool, 64 * MIB, 0), 64 * MIB, UMP_KIND_DEVICE);
    assert_int_equal(tu_stats(pool, 0).reserved_bytes, 96 * MIB);
    fill(pool, &l);
    size_t live = live_bytes(pool);
    char ck[128];
    path_of(ck, sizeof(ck), "carved.ckpt");
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    for (int i = 0; i < 4; i++) {
        int tier = i % 2 ? UMP_TIER_NVME : UMP_TIER_HOST;
        expect_rc(ump_pool_suspend(pool, tier), 0);
        for (int d = 0; d < NDEV; d++)
            assert_int_equal(tu_stats(pool, d).reserved_bytes, 0);
        expect_rc(ump_pool_resume(pool), 0);
        verify(pool, &l);
    }
    /* each has chunks of its own now */
    ump_ptr_info_t info = tu_info(pool, l.it[0].p);
    assert_ptr_equal(info.chunk_base, l.it[0].p);
    assert_true(info.chunk_size <= 10 * MIB);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    check_restored(pool, &l, live);
    unlink(ck);
}

/* The clean errors, frees while suspended, and a failure midway. */
static void test_suspend_errors(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    void *p = NULL;
    /* Two more, outside the chain, freed while suspended. */
    void *x = tu_alloc(pool, 3000, 1), *y = tu_alloc(pool, 4 * MIB, 2);
    expect_rc(ump_pool_resume(pool), -EINVAL);
    expect_rc(ump_pool_suspend(pool, 7), -EINVAL);
    expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), 0);
    expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), -EBUSY);
    expect_rc(ump_alloc(pool, 1000, NULL, &p), -EBUSY);
    expect_rc(ump_alloc(pool, 10 * MIB, NULL, &p), -EBUSY);
    expect_rc(ump_acquire(pool, l.it[0].p, 0, 0, NULL), -EBUSY);
    char ck[128];
    path_of(ck, sizeof(ck), "susp.ckpt");
    expect_rc(ump_pool_checkpoint(pool, ck), -EBUSY);
    expect_rc(ump_pool_destroy(pool), -EBUSY);
    /* Frees work: the freed ones are simply not brought back. */
    tu_free(pool, x);
    tu_free(pool, y);
    expect_rc(ump_free(pool, y), -EINVAL); /* and twice is refused */
    expect_rc(ump_pool_resume(pool), 0);
    verify(pool, &l);
    expect_rc(ump_alloc(pool, 1000, NULL, &p), 0);
    tu_free(pool, p);

    /* The disk fails midway through a suspend to NVMe: an error, the pool
     * awake, every byte readable where it is. */
    for (int nth = 1; nth <= 7; nth += 3) {
        expect_rc(offload_inject_fault(pool, "eio", nth), 0);
        int rc = ump_pool_suspend(pool, UMP_TIER_NVME);
        expect_rc(offload_inject_fault(pool, "eio", 0), 0);
        assert_true(rc < 0);
        verify(pool, &l);
        expect_rc(ump_alloc(pool, 1000, NULL, &p), 0);
        tu_free(pool, p);
    }
    free_all(pool, &l);
    tu_pool_destroy(pool);

    /* No NVMe tier: suspending to it is refused. */
    char c[512];
    snprintf(c, sizeof(c), "backend:sim,sim_devices:2,publish:false");
    expect_rc(ump_pool_create(c, &pool), 0);
    expect_rc(ump_pool_suspend(pool, UMP_TIER_NVME), -EINVAL);
    tu_pool_destroy(pool);
}


/* ---- what an adversarial review found ---------------------------------- */

/* Rewrites the index of file through mutate (which returns false when it
 * found nothing to change), then its crcs, as a crafted file would be. */
static bool craft(const char *from, const char *to,
                  bool (*mutate)(struct ckpt_header *h, char *index))
{
    copy_file(from, to, -1, -1);
    int fd = open(to, O_RDWR);
    assert_true(fd >= 0);
    char block[CKPT_HEADER_BLOCK];
    struct ckpt_header h;
    assert_int_equal(pread(fd, block, sizeof(block), 0), (ssize_t)sizeof(block));
    memcpy(&h, block, sizeof(h));
    char *index = malloc(h.index_len);
    assert_non_null(index);
    assert_int_equal(pread(fd, index, h.index_len, (off_t)h.index_off),
                     (ssize_t)h.index_len);
    bool changed = mutate(&h, index);
    h.index_crc = crc32c(0, index, h.index_len);
    h.header_crc = 0;
    memcpy(block, &h, sizeof(h));
    h.header_crc = crc32c(0, block, sizeof(block));
    memcpy(block, &h, sizeof(h));
    assert_int_equal(pwrite(fd, index, h.index_len, (off_t)h.index_off),
                     (ssize_t)h.index_len);
    assert_int_equal(pwrite(fd, block, sizeof(block), 0),
                     (ssize_t)sizeof(block));
    close(fd);
    free(index);
    return changed;
}

/* The first record of kind (and its offset in the index), or NULL. */
static struct ckpt_rec *find_rec(const struct ckpt_header *h, char *index,
                                 uint32_t kind, uint32_t min_sub)
{
    size_t off = 0;
    for (uint64_t i = 0; i < h->nrec; i++) {
        struct ckpt_rec *r = (struct ckpt_rec *)(void *)(index + off);
        if (r->kind == kind && r->nsub >= min_sub)
            return r;
        size_t each = r->kind == CKPT_RUN       ? sizeof(struct ckpt_part)
                      : r->kind == CKPT_TRACKED ? sizeof(struct ckpt_tseg)
                                                : sizeof(struct ckpt_obj);
        off += sizeof(*r) + r->nsub * each;
    }
    return NULL;
}

static bool dup_slab_object(struct ckpt_header *h, char *index)
{
    struct ckpt_rec *r = find_rec(h, index, CKPT_SLAB, 2);
    if (!r)
        return false;
    struct ckpt_obj *o = (struct ckpt_obj *)(void *)(r + 1);
    o[1].idx = o[0].idx;
    return true;
}

static bool overlap_runs(struct ckpt_header *h, char *index)
{
    struct ckpt_rec *s = find_rec(h, index, CKPT_SLAB, 1),
                    *r = find_rec(h, index, CKPT_RUN, 1);
    if (!s || !r || r->n < 2)
        return false;
    r->g = s->g; /* a run over a slab's granule */
    return true;
}

static bool host_part_in_device_run(struct ckpt_header *h, char *index)
{
    struct ckpt_rec *r = find_rec(h, index, CKPT_RUN, 2);
    if (!r || r->place < 0)
        return false;
    ((struct ckpt_part *)(void *)(r + 1))[1].place = CKPT_PLACE_HOST;
    return true;
}

/* The configuration's NUL, the index's last byte, overwritten: a reader
 * that looks for its end must not run past the index. */
static bool config_unterminated(struct ckpt_header *h, char *index)
{
    index[h->index_len - 1] = 'x';
    return true;
}

static bool data_before_index(struct ckpt_header *h, char *index)
{
    (void)index;
    h->data_off = 0;
    return true;
}

/* Crafted files whose crcs are right: -EINVAL, no pool, nothing held. */
static void test_crafted_files(void **state)
{
    (void)state;
    static struct load l;
    char ck[128], bad[128];
    size_t live = saved_workload(&l, "craft.ckpt", ck, sizeof(ck));
    path_of(bad, sizeof(bad), "crafted.ckpt");
    ump_pool_t *pool;
    bool (*mutate[])(struct ckpt_header *, char *) = {
        dup_slab_object, overlap_runs, host_part_in_device_run,
        data_before_index, config_unterminated};
    for (size_t i = 0; i < sizeof(mutate) / sizeof(mutate[0]); i++) {
        assert_true(craft(ck, bad, mutate[i]));
        pool = (ump_pool_t *)0x1;
        int rc = ump_pool_restore(bad, NULL, &pool);
        if (rc != -EINVAL)
            fail_msg("crafted file %zu: restore = %d (%s)", i, rc,
                     ump_strerror(rc));
        assert_ptr_equal(pool, (ump_pool_t *)0x1);
    }
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    check_restored(pool, &l, live);
    unlink(ck);
    unlink(bad);
}

/* ---- records whose size does not need all their granules ------------- */

/* Mappings of the sim's device and host memory (memfds) in the process:
 * a pool's memory left behind shows here. (Not every mapping: malloc and
 * a sanitizer's allocator map more as they grow.) */
static int count_pool_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, "memfd:umpool-sim-") != NULL;
    fclose(f);
    return n;
}

/* Is [base, base + size) free of mappings? A pool's reservation left
 * behind would hold it. */
static bool range_free(uint64_t base, uint64_t size)
{
    void *want = (void *)(uintptr_t)base;
    void *p = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p != MAP_FAILED)
        munmap(p, size);
    return p == want;
}

/* The header of the checkpoint at path. */
static struct ckpt_header header_of(const char *path)
{
    struct ckpt_header h;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
    return h;
}

/* A restore of path refused with -EINVAL, one log line containing `why`
 * (NULL: any), and nothing left behind: no pool, no descriptor, no pool
 * memory mapped, its address range free. */
static void expect_refused(const char *path, const char *why)
{
    int fds = count_fds(), maps = count_pool_maps();
    ump_pool_t *pool = (ump_pool_t *)0x1;
    struct tu_capture cap;
    char log[4096];
    tu_capture_start(&cap);
    int rc = ump_pool_restore(path, NULL, &pool);
    tu_capture_stop(&cap, log, sizeof(log));
    if (rc != -EINVAL)
        fail_msg("restore = %d (%s), expected -EINVAL (%s); log: %s", rc,
                 ump_strerror(rc), why ? why : "any", log);
    assert_ptr_equal(pool, (ump_pool_t *)0x1);
    if (tu_count_log_lines(log) != 1 || (why && !strstr(log, why)))
        fail_msg("expected one log line saying \"%s\"; got: %s",
                 why ? why : "why", log);
    assert_int_equal(count_fds(), fds);
    assert_int_equal(count_pool_maps(), maps);
    struct ckpt_header h = header_of(path);
    assert_true(range_free(h.va_base, h.va_size));
}

/* The n-granule record of kind (at least min_n granules) its size is set
 * on, and how: the header's live bytes follow, so that only the record is
 * wrong. */
static uint32_t resize_kind;
static uint64_t resize_min_n;
static uint64_t (*resize_to)(uint64_t n, uint64_t granule);

static bool resize_record(struct ckpt_header *h, char *index)
{
    size_t off = 0;
    for (uint64_t i = 0; i < h->nrec; i++) {
        struct ckpt_rec *r = (struct ckpt_rec *)(void *)(index + off);
        if (r->kind == resize_kind && r->n >= resize_min_n) {
            uint64_t size = resize_to(r->n, h->granule);
            h->live_bytes = h->live_bytes - r->size + size;
            r->size = size;
            return true;
        }
        size_t each = r->kind == CKPT_RUN       ? sizeof(struct ckpt_part)
                      : r->kind == CKPT_TRACKED ? sizeof(struct ckpt_tseg)
                                                : sizeof(struct ckpt_obj);
        off += sizeof(*r) + r->nsub * each;
    }
    return false;
}

static uint64_t one_byte(uint64_t n, uint64_t granule)
{
    (void)n, (void)granule;
    return 1;
}

/* Exactly n - 1 granules: the last one is not needed. */
static uint64_t one_granule_less(uint64_t n, uint64_t granule)
{
    return (n - 1) * granule;
}

static uint64_t half_a_granule(uint64_t n, uint64_t granule)
{
    (void)n;
    return granule / 2;
}

/* A record of n granules whose size needs fewer (the report: 3 granules,
 * size 1, restored with its last chunks out of reach): -EINVAL with a log
 * line that says so, nothing held, and the good file still restores. */
static void test_size_needs_fewer_granules(void **state)
{
    (void)state;
    static struct load l;
    char ck[128], bad[128];
    size_t live = saved_workload(&l, "fewer.ckpt", ck, sizeof(ck));
    path_of(bad, sizeof(bad), "fewer-bad.ckpt");
    ump_pool_t *pool = NULL;
    /* A first restore, so that what the process sets up once (the sim's
     * threads, the log) is there before the counts are taken. */
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    const struct {
        uint32_t kind;
        uint64_t min_n;
        uint64_t (*to)(uint64_t, uint64_t);
    } cases[] = {
        {CKPT_RUN, 3, one_byte},          /* the report's record */
        {CKPT_RUN, 2, one_granule_less},  /* the boundary */
        {CKPT_RUN, 2, half_a_granule},
        {CKPT_TRACKED, 2, one_granule_less},
        {CKPT_TRACKED, 2, one_byte},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        resize_kind = cases[i].kind;
        resize_min_n = cases[i].min_n;
        resize_to = cases[i].to;
        assert_true(craft(ck, bad, resize_record));
        expect_refused(bad, "granule");
    }
    expect_rc(ump_pool_restore(ck, NULL, &pool), 0);
    check_restored(pool, &l, live);
    unlink(ck);
    unlink(bad);
}

/* A run partly discarded (DONTNEED, then NVMe) restored into a pool
 * without NVMe: the discarded part gets memory but no data, and every
 * other byte is right (the blocks are not shifted). overflow:host saved
 * in the file: on one device, what fits nowhere overflows. */
static void test_restore_elsewhere(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool("overflow:host");
    static struct load l;
    populate(pool, &l);
    /* 10 MiB: more than one chunk (max_chunk 8 MiB); the advice drops
     * the first, whatever its size (an idle chunk may serve). */
    void *part = alloc_hinted(pool, 10 * MIB, 1, NULL, UMP_HINT_OFFLOAD);
    tu_fill(part, 10 * MIB, 77);
    size_t first = tu_info(pool, part).chunk_size;
    assert_true(first < 10 * MIB);
    expect_rc(ump_advise(pool, part, first, UMP_ADVISE_DONTNEED), 0);
    expect_rc(ump_evict(pool, part, 0, UMP_TIER_NVME), 0);
    size_t live = live_bytes(pool);
    char ck[128];
    path_of(ck, sizeof(ck), "elsewhere.ckpt");
    expect_rc(ump_pool_checkpoint(pool, ck), 0);
    free_all(pool, &l);
    tu_free(pool, part);
    tu_pool_destroy(pool);
    expect_rc(ump_pool_restore(ck, "nvme_dir:", &pool), 0);
    assert_int_equal(tu_info(pool, part).tier, UMP_TIER_HOST);
    /* Its first chunk as saved: the advice dropped it whole. The pattern
     * is positional: compared with a fresh copy of it. */
    assert_int_equal(tu_info(pool, part).chunk_size, first);
    char *want = malloc(10 * MIB);
    assert_non_null(want);
    tu_fill(want, 10 * MIB, 77);
    assert_memory_equal((char *)part + first, want + first,
                        10 * MIB - first);
    free(want);
    tu_free(pool, part);
    check_restored(pool, &l, live - 10 * MIB);
    /* One small device: the runs that fit nowhere overflow. */
    expect_rc(ump_pool_restore(ck, "sim_devices:1,sim_device_mem:64M,"
                                   "pinned_limit:256M", &pool), 0);
    int overflowed = 0;
    for (size_t i = 0; i < l.n; i++) {
        ump_ptr_info_t info = tu_info(pool, l.it[i].p);
        if (l.it[i].nodata || info.tier == UMP_TIER_NVME)
            continue; /* the device is too full to bring them up */
        overflowed += info.kind == UMP_KIND_DEVICE && info.device == -1 &&
                      info.tier == UMP_TIER_HOST &&
                      l.it[i].size < 8 * MIB; /* not the host tier's */
        tu_assert_pattern((char *)l.it[i].p + 8, l.it[i].size - 8,
                          l.it[i].seed);
    }
    assert_true(overflowed > 0);
    tu_free(pool, part);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    unlink(ck);
}

struct racer {
    ump_pool_t *pool;
    void *p;
    int device;
    _Atomic bool *stop;
    int kind; /* 0: evict and acquire its own run; 1: allocate and free */
    int errors;
};

static void *race_main(void *arg)
{
    struct racer *x = arg;
    while (!atomic_load(x->stop)) {
        if (x->kind == 0) {
            int rc = ump_evict(x->pool, x->p, 0, UMP_TIER_HOST);
            if (!rc)
                rc = ump_acquire(x->pool, x->p, 0, x->device, NULL);
            if (!rc)
                rc = ump_release(x->pool, x->p, 0);
            x->errors += rc && rc != -EBUSY;
        } else {
            void *q = NULL;
            ump_hints_t h = tu_hints(x->device);
            int rc = ump_alloc(x->pool, 1000 + (size_t)x->device * 3000000,
                               &h, &q);
            if (!rc)
                rc = ump_free(x->pool, q);
            x->errors += rc && rc != -EBUSY;
        }
    }
    return NULL;
}

/* Checkpoints and suspends while other threads move their own memory and
 * allocate: a checkpoint ends (is not starved by moves), never runs on a
 * suspended pool (-EBUSY instead), and a suspend leaves no device memory
 * behind, whatever raced with it. */
static void test_races(void **state)
{
    (void)state;
    ump_pool_t *pool = make_pool(NULL);
    static struct load l;
    populate(pool, &l);
    enum { NR = 4 };
    _Atomic bool stop = false;
    struct racer r[NR];
    pthread_t t[NR];
    for (int i = 0; i < NR; i++) {
        r[i] = (struct racer){.pool = pool, .device = i % NDEV, .stop = &stop,
                              .kind = i % 2};
        if (r[i].kind == 0)
            r[i].p = alloc_hinted(pool, 4 * MIB, i, NULL, UMP_HINT_OFFLOAD);
        assert_int_equal(pthread_create(&t[i], NULL, race_main, &r[i]), 0);
    }
    char ck[128];
    path_of(ck, sizeof(ck), "race.ckpt");
    for (int round = 0; round < 20; round++) {
        int rc = ump_pool_checkpoint(pool, ck);
        assert_true(rc == 0);
        expect_rc(ump_pool_suspend(pool, UMP_TIER_HOST), 0);
        for (int d = 0; d < NDEV; d++)
            assert_int_equal(tu_stats(pool, d).reserved_bytes, 0);
        expect_rc(ump_pool_resume(pool), 0);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < NR; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].errors, 0);
        if (r[i].p)
            tu_free(pool, r[i].p);
    }
    verify(pool, &l);
    free_all(pool, &l);
    tu_pool_destroy(pool);
    unlink(ck);
}

/* ---- the index fuzzed, its crcs recomputed ----------------------------- */

/*
 * A small pool with every kind of record (slab objects on devices and on
 * the host place, runs on one device and across both, a run of pinned
 * host memory, an overflowed NO_SPILL run, tracked runs on each tier, in
 * part, discarded, a small offloadable one and a tracked one without
 * UMP_HINT_OFFLOAD: fuzz_covers) is checkpointed once; then fields of its
 * header and index are set to boundary and random values, the crcs
 * recomputed, and each file restored. It is refused (-EINVAL with one log
 * line; -EIO only for a header that says the file is longer than it is;
 * -ENOSPC for one that fits nowhere; a reservation's error for an address
 * range moved) with nothing left behind, or it restores into a pool that
 * is whole: what the index lists and nothing else, every granule of each
 * allocation its own, acquired and released whole, freed, and then
 * nothing held. Deterministic: a fixed seed and count.
 */
#define FUZZ_MUTANTS 1500
#define FUZZ_SEED 0x9e3779b97f4a7c15ull

static void fuzz_conf(char *buf, size_t len)
{
    /* Little data (each accepted mutant reads it all); chunks of one
     * granule, so that a tracked run has a segment per granule. */
    snprintf(buf, len,
             "backend:sim,sim_devices:2,sim_device_mem:48M,chunk_size:2M,"
             "max_chunk:2M,host_reserve:0,host_limit:64M,pinned_limit:32M,"
             "nvme_dir:%s,nvme_queue_depth:2,overflow:host,publish:false",
             dir);
}

/* The pool of the fuzzed checkpoint, written to path. */
static void fuzz_base(const char *path)
{
    char c[512];
    fuzz_conf(c, sizeof(c));
    ump_pool_t *pool = NULL;
    expect_rc(ump_pool_create(c, &pool), 0);
    void *p[32];
    int n = 0;
    /* Device 1 full, and an allocation that may not spill: it overflows. */
    void *fill = alloc_hinted(pool, 48 * MIB, 1, NULL, UMP_HINT_NO_SPILL);
    void *ov = p[n++] = alloc_hinted(pool, 1536 * 1024, 1, NULL,
                                     UMP_HINT_NO_SPILL);
    tu_free(pool, fill);
    expect_rc(ump_trim(pool), 0); /* its chunks go: device 1 has room */
    for (int i = 0; i < 3; i++)
        p[n++] = tu_alloc(pool, 1000, 0);
    p[n++] = tu_alloc(pool, 5000, 1);
    p[n++] = tu_alloc(pool, 3 * MIB, 0);
    p[n++] = alloc_hinted(pool, 4 * MIB, 0, "interleave", 0);
    void *o2 = p[n++] = alloc_hinted(pool, 4 * MIB, 0, NULL, UMP_HINT_OFFLOAD);
    void *o1 = p[n++] = alloc_hinted(pool, 2 * MIB, 1, NULL, UMP_HINT_OFFLOAD);
    void *od = p[n++] = alloc_hinted(pool, 2 * MIB, 0, NULL, UMP_HINT_OFFLOAD);
    p[n++] = alloc_hinted(pool, 1000, 1, NULL, UMP_HINT_OFFLOAD);
    void *t1 = p[n++] = tu_alloc(pool, 2 * MIB, 0);
    void *h[3];
    expect_rc(ump_host_alloc(pool, 8192, &h[0]), 0);
    expect_rc(ump_host_alloc(pool, 8192, &h[1]), 0);
    expect_rc(ump_host_alloc(pool, 1536 * 1024, &h[2]), 0);
    expect_rc(ump_evict(pool, o2, 2 * MIB, UMP_TIER_NVME), 0); /* in part */
    expect_rc(ump_evict(pool, o1, 0, UMP_TIER_HOST), 0);
    expect_rc(ump_advise(pool, od, 0, UMP_ADVISE_DONTNEED), 0);
    expect_rc(ump_evict(pool, od, 0, UMP_TIER_NVME), 0);
    expect_rc(ump_evict(pool, t1, 0, UMP_TIER_HOST), 0); /* tracked now */
    ump_ptr_info_t oi = tu_info(pool, ov);
    assert_true(oi.kind == UMP_KIND_DEVICE && oi.device == -1 &&
                oi.tier == UMP_TIER_HOST);
    assert_int_equal(tu_info(pool, o2).tier, UMP_TIER_NVME);
    expect_rc(ump_pool_set_root(pool, p[4]), 0);
    expect_rc(ump_pool_checkpoint(pool, path), 0);
    for (int i = 0; i < n; i++)
        tu_free(pool, p[i]);
    for (int i = 0; i < 3; i++)
        expect_rc(ump_host_free(pool, h[i]), 0);
    tu_pool_destroy(pool);
}

/* What a field is, for the values worth trying. */
enum { F_PLAIN, F_BYTES, F_COUNT, F_PLACE };

struct field {
    bool header;   /* in the header, else in the index */
    size_t off;    /* where */
    unsigned width; /* bytes: 4 or 8 */
    int what;      /* F_* */
    uint64_t n;    /* F_BYTES of a record: its granules */
    const char *name;
};

struct fuzz {
    struct ckpt_header h;      /* the good file's */
    char *index;               /* its index */
    struct field f[512];       /* the header's first */
    size_t nf, nheader;
};

static void add_field(struct fuzz *z, bool header, size_t off, unsigned width,
                      int what, uint64_t n, const char *name)
{
    assert_true(z->nf < sizeof(z->f) / sizeof(z->f[0]));
    z->f[z->nf++] = (struct field){header, off, width, what, n, name};
}

#define HFIELD(z, m, what)                                                     \
    add_field(z, true, offsetof(struct ckpt_header, m),                        \
              sizeof(((struct ckpt_header *)0)->m), what, 0, "header." #m)
#define RFIELD(z, at, T, m, what, n, name)                                     \
    add_field(z, false, (at) + offsetof(T, m), sizeof(((T *)0)->m), what, n,  \
              name)

/* Every field of the header and of the records and their entries. */
static void fuzz_fields(struct fuzz *z)
{
    HFIELD(z, granule, F_BYTES);
    HFIELD(z, va_base, F_BYTES);
    HFIELD(z, va_size, F_BYTES);
    HFIELD(z, ndev, F_COUNT);
    HFIELD(z, flags, F_PLAIN);
    HFIELD(z, nrec, F_COUNT);
    HFIELD(z, nblocks, F_COUNT);
    HFIELD(z, index_len, F_COUNT);
    HFIELD(z, data_off, F_BYTES);
    HFIELD(z, live_bytes, F_BYTES);
    HFIELD(z, root, F_BYTES);
    z->nheader = z->nf;
    size_t off = 0;
    for (uint64_t i = 0; i < z->h.nrec; i++) {
        struct ckpt_rec r;
        memcpy(&r, z->index + off, sizeof(r));
        RFIELD(z, off, struct ckpt_rec, g, F_COUNT, 0, "rec.g");
        RFIELD(z, off, struct ckpt_rec, n, F_COUNT, 0, "rec.n");
        RFIELD(z, off, struct ckpt_rec, size, F_BYTES, r.n, "rec.size");
        RFIELD(z, off, struct ckpt_rec, kind, F_COUNT, 0, "rec.kind");
        RFIELD(z, off, struct ckpt_rec, flags, F_PLAIN, 0, "rec.flags");
        RFIELD(z, off, struct ckpt_rec, place, F_PLACE, 0, "rec.place");
        RFIELD(z, off, struct ckpt_rec, nsub, F_COUNT, 0, "rec.nsub");
        off += sizeof(r);
        for (uint32_t k = 0; k < r.nsub; k++) {
            if (r.kind == CKPT_RUN) {
                RFIELD(z, off, struct ckpt_part, n, F_COUNT, 0, "part.n");
                RFIELD(z, off, struct ckpt_part, place, F_PLACE, 0,
                       "part.place");
                RFIELD(z, off, struct ckpt_part, zero, F_PLAIN, 0,
                       "part.zero");
                off += sizeof(struct ckpt_part);
            } else if (r.kind == CKPT_TRACKED) {
                RFIELD(z, off, struct ckpt_tseg, n, F_COUNT, 0, "seg.n");
                RFIELD(z, off, struct ckpt_tseg, home, F_PLACE, 0,
                       "seg.home");
                RFIELD(z, off, struct ckpt_tseg, tier, F_PLACE, 0,
                       "seg.tier");
                RFIELD(z, off, struct ckpt_tseg, dev, F_PLACE, 0, "seg.dev");
                RFIELD(z, off, struct ckpt_tseg, nodata, F_PLAIN, 0,
                       "seg.nodata");
                off += sizeof(struct ckpt_tseg);
            } else {
                RFIELD(z, off, struct ckpt_obj, idx, F_COUNT, 0, "obj.idx");
                RFIELD(z, off, struct ckpt_obj, req, F_BYTES, 1, "obj.req");
                off += sizeof(struct ckpt_obj);
            }
        }
    }
}

/* The good file has every kind of record the fuzzing is to reach. */
static void fuzz_covers(const struct fuzz *z)
{
    enum { SLAB_DEV, SLAB_HOST, RUN_DEV, RUN_PARTS, RUN_HOST, RUN_OVER,
           T_DEV, T_HOST, T_NVME, T_NODATA, T_PLAIN, T_SMALL, NCOVER };
    bool has[NCOVER] = {false};
    size_t off = 0;
    for (uint64_t i = 0; i < z->h.nrec; i++) {
        struct ckpt_rec r;
        memcpy(&r, z->index + off, sizeof(r));
        off += sizeof(r);
        if (r.kind == CKPT_SLAB) {
            has[r.place == CKPT_PLACE_HOST ? SLAB_HOST : SLAB_DEV] = true;
            off += r.nsub * sizeof(struct ckpt_obj);
        } else if (r.kind == CKPT_RUN) {
            has[r.place == CKPT_PLACE_HOST       ? RUN_HOST
                : r.place == CKPT_PLACE_OVERFLOW ? RUN_OVER
                                                 : RUN_DEV] = true;
            has[RUN_PARTS] |= r.nsub > 1;
            off += r.nsub * sizeof(struct ckpt_part);
        } else {
            has[T_PLAIN] |= !(r.flags & UMP_HINT_OFFLOAD);
            has[T_SMALL] |= r.size < z->h.granule;
            for (uint32_t k = 0; k < r.nsub; k++) {
                struct ckpt_tseg t;
                memcpy(&t, z->index + off, sizeof(t));
                off += sizeof(t);
                has[t.nodata ? T_NODATA
                    : t.tier == UMP_TIER_DEVICE ? T_DEV
                    : t.tier == UMP_TIER_HOST   ? T_HOST
                                                : T_NVME] = true;
            }
        }
    }
    for (int k = 0; k < NCOVER; k++)
        if (!has[k])
            fail_msg("the fuzzed checkpoint lacks record kind %d", k);
}

static uint64_t get_field(const void *base, const struct field *f)
{
    if (f->width == 8) {
        uint64_t v;
        memcpy(&v, (const char *)base + f->off, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, (const char *)base + f->off, 4);
    return v;
}

static void set_field(void *base, const struct field *f, uint64_t v)
{
    if (f->width == 8) {
        memcpy((char *)base + f->off, &v, 8);
    } else {
        uint32_t w = (uint32_t)v;
        memcpy((char *)base + f->off, &w, 4);
    }
}

#define NVALUES(a) (sizeof(a) / sizeof((a)[0]))

/* A value for field f, which holds v: a boundary or a random one, never v
 * (a mutant that changes nothing tests nothing); half of the time one of
 * the values of its kind. */
static uint64_t fuzz_value(uint64_t *seed, const struct fuzz *z,
                           const struct field *f, uint64_t v)
{
    uint64_t g = z->h.granule, max = f->width == 8 ? UINT64_MAX : UINT32_MAX;
    /* Granules: a record's, or what v is in granules. */
    uint64_t n = f->n ? f->n : (v / g ? v / g : 1);
    for (;;) {
        /* Drawn one by one: the order of an initializer's is unspecified,
         * and the sequence must be the same whatever the compiler. */
        uint64_t r = rnd(seed);
        uint64_t small = rnd(seed) % 64;
        const uint64_t any[] = {0, 1, v - 1, v + 1, 2 * v, v / 2, max,
                                max - 1, r, small};
        /* Granule multiples and one off them, class boundaries, pages. */
        const uint64_t bytes[] = {(n - 1) * g, (n - 1) * g + 1, n * g - 1,
                                  n * g, n * g + 1, (n + 1) * g, g / 2,
                                  256, 257, 1024, 1025, 1280, 4095, 4096,
                                  8192, SC_MAX, SC_MAX + 1};
        /* Places, tiers, devices: negative, the others, past them. */
        const uint64_t places[] = {(uint64_t)-1, (uint64_t)-2, (uint64_t)-3,
                                   0, 1, 2, 3, 31, 32, (uint64_t)INT32_MIN,
                                   INT32_MAX};
        int what = rnd(seed) % 2 ? f->what : F_PLAIN;
        uint64_t x = what == F_BYTES   ? bytes[rnd(seed) % NVALUES(bytes)]
                     : what == F_PLACE ? places[rnd(seed) % NVALUES(places)]
                                       : any[rnd(seed) % NVALUES(any)];
        if ((x & max) != v)
            return x & max;
    }
}

/* The sum of the sizes an index lists, read leniently (a mutant's): the
 * header's live bytes made to agree, so that the records' own rules are
 * what refuses them. */
static uint64_t fuzz_live(const struct ckpt_header *h, const char *index,
                          size_t len)
{
    uint64_t live = 0;
    size_t off = 0;
    for (uint64_t i = 0; i < h->nrec && len - off >= sizeof(struct ckpt_rec);
         i++) {
        struct ckpt_rec r;
        memcpy(&r, index + off, sizeof(r));
        off += sizeof(r);
        size_t each = r.kind == CKPT_RUN       ? sizeof(struct ckpt_part)
                      : r.kind == CKPT_TRACKED ? sizeof(struct ckpt_tseg)
                      : r.kind == CKPT_SLAB    ? sizeof(struct ckpt_obj)
                                               : 0;
        if (!each || r.nsub > (len - off) / each)
            break;
        if (r.kind != CKPT_SLAB)
            live += r.size;
        for (uint32_t k = 0; r.kind == CKPT_SLAB && k < r.nsub; k++) {
            struct ckpt_obj o;
            memcpy(&o, index + off + k * each, sizeof(o));
            live += o.req;
        }
        off += r.nsub * each;
    }
    return live;
}

static uint32_t fuzz_crc(int fd, uint64_t off, uint64_t len, uint64_t size)
{
    if (off >= size)
        return 0;
    if (len > size - off)
        len = size - off;
    char buf[1 << 16];
    uint32_t crc = 0;
    for (uint64_t at = 0; at < len;) {
        size_t k = len - at < sizeof(buf) ? (size_t)(len - at) : sizeof(buf);
        assert_int_equal(pread(fd, buf, k, (off_t)(off + at)), (ssize_t)k);
        crc = crc32c(crc, buf, k);
        at += k;
    }
    return crc;
}

/* One allocation a restored pool must hold. */
struct want {
    char *p;
    size_t size;   /* as requested */
    size_t n;      /* runs: granules */
    size_t charge; /* bytes live_bytes counts */
    int place;     /* the record's */
    bool slab;
};

/* What the index lists (a restored one: its records passed). */
static size_t fuzz_wants(const struct ckpt_header *h, const char *index,
                         struct want *w, size_t max)
{
    size_t off = 0, n = 0;
    for (uint64_t i = 0; i < h->nrec; i++) {
        struct ckpt_rec r;
        memcpy(&r, index + off, sizeof(r));
        off += sizeof(r);
        char *base = (char *)(uintptr_t)(h->va_base + r.g * h->granule);
        if (r.kind == CKPT_SLAB) {
            for (uint32_t k = 0; k < r.nsub; k++) {
                struct ckpt_obj o;
                memcpy(&o, index + off, sizeof(o));
                off += sizeof(o);
                assert_true(n < max);
                w[n++] = (struct want){base + (size_t)o.idx * r.size, o.req, 0,
                                       r.size, r.place, true};
            }
            continue;
        }
        assert_true(n < max);
        w[n++] = (struct want){base, r.size, r.n, r.n * h->granule, r.place,
                               false};
        off += r.nsub * (r.kind == CKPT_RUN ? sizeof(struct ckpt_part)
                                            : sizeof(struct ckpt_tseg));
    }
    return n;
}

/* What the fuzzing does now, named by a failure: the mutant. */
static char fuzz_what[256] = "the good file";

#define FUZZ_TRUE(c)                                                           \
    do {                                                                       \
        if (!(c))                                                              \
            fail_msg("%s: %s does not hold (line %d)", fuzz_what, #c,         \
                     __LINE__);                                                \
    } while (0)
#define FUZZ_EQ(a, b)                                                          \
    do {                                                                       \
        uintmax_t a_ = (uintmax_t)(a), b_ = (uintmax_t)(b);                    \
        if (a_ != b_)                                                          \
            fail_msg("%s: %s is %#jx, not %s %#jx (line %d)", fuzz_what, #a,  \
                     a_, #b, b_, __LINE__);                                    \
    } while (0)
#define FUZZ_RC(call, want)                                                    \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != (want))                                                     \
            fail_msg("%s: %s = %d (%s) (line %d)", fuzz_what, #call, rc_,     \
                     ump_strerror(rc_), __LINE__);                             \
    } while (0)

/* The pool's own bookkeeping, walked (runs_walk's callback): each live
 * run's granules are its own and as many as its size needs, each slab's
 * live objects of its class; counted in *arg. */
static int fuzz_walk(ump_pool_t *pool, struct slab *s, struct run *r,
                     void *arg)
{
    size_t *count = arg;
    if (s) {
        FUZZ_EQ(s->size, sc_size(s->cls));
        FUZZ_TRUE(s->cls < pool->nsmall);
        FUZZ_EQ(s->nobj, pool->chunk_size / s->size);
        for (uint32_t i = 0; i < s->nobj; i++) {
            uint32_t word = atomic_load(&s->word[i]);
            if (obj_state(word) != OBJ_LIVE)
                continue;
            FUZZ_TRUE(obj_req(word) > 0);
            FUZZ_EQ(sc_index(obj_req(word)), s->cls);
            (*count)++;
        }
        return 0;
    }
    size_t size = atomic_load(&r->size);
    FUZZ_EQ(r->n, (size + pool->chunk_size - 1) / pool->chunk_size);
    for (size_t g = r->start; g < r->start + r->n; g++) {
        uintptr_t tag = vas_tag(&pool->vas, g);
        FUZZ_EQ(vas_tag_kind(tag), VAS_RUN);
        FUZZ_EQ(vas_tag_owner(tag), r);
    }
    if (r->res) {
        size_t sum = 0;
        for (size_t i = 0; i < r->res->nseg; i++) {
            FUZZ_EQ(r->res->seg[i].g, r->start + sum);
            sum += r->res->seg[i].n;
        }
        FUZZ_EQ(sum, r->n);
    } else {
        for (size_t g = r->start; g < r->start + r->n;) {
            const struct chunk *c = chunks_at(pool, g);
            FUZZ_TRUE(c);
            FUZZ_EQ(c->g, g);
            g += c->n;
            FUZZ_TRUE(g <= r->start + r->n);
        }
    }
    (*count)++;
    return 0;
}

/* Every segment of the run at p is on a device (after a whole acquire). */
static void fuzz_all_up(ump_pool_t *pool, void *p)
{
    pthread_mutex_lock(&pool->lock);
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, p));
    struct run *r = vas_tag_owner(tag);
    bool up = true;
    for (size_t i = 0; r->res && i < r->res->nseg; i++)
        up &= r->res->seg[i].tier == UMP_TIER_DEVICE;
    pthread_mutex_unlock(&pool->lock);
    FUZZ_TRUE(up);
}

/* A restored mutant: whole, reachable, freed, nothing left. */
static void fuzz_check_pool(ump_pool_t *pool, const struct ckpt_header *h,
                            const char *index)
{
    static struct want w[256];
    size_t n = fuzz_wants(h, index, w, 256), charge = 0;
    for (size_t i = 0; i < n; i++)
        charge += w[i].charge;
    ump_stats_t dev, host;
    FUZZ_RC(ump_stats(pool, UMP_DEVICE_ALL, &dev), 0);
    FUZZ_RC(ump_stats(pool, UMP_LOC_HOST, &host), 0);
    FUZZ_EQ(dev.live_count + host.live_count, n);
    FUZZ_EQ(dev.live_bytes + host.live_bytes, charge);
    size_t walked = 0;
    pthread_mutex_lock(&pool->lock);
    int rc = runs_walk(pool, fuzz_walk, &walked);
    pthread_mutex_unlock(&pool->lock);
    FUZZ_RC(rc, 0);
    FUZZ_EQ(walked, n);
    for (size_t i = 0; i < n; i++) {
        ump_ptr_info_t info, last;
        FUZZ_RC(ump_ptr_info(pool, w[i].p, &info), 0);
        FUZZ_RC(ump_ptr_info(pool, w[i].p + w[i].size - 1, &last), 0);
        FUZZ_EQ(info.base, w[i].p);
        FUZZ_EQ(info.size, w[i].size);
        FUZZ_EQ(info.kind, w[i].place == CKPT_PLACE_HOST ? UMP_KIND_HOST
                                                         : UMP_KIND_DEVICE);
        FUZZ_EQ(last.base, w[i].p);
        int home = w[i].place >= 0 && w[i].place < ump_device_count(pool)
                       ? w[i].place
                       : 0;
        FUZZ_RC(ump_acquire(pool, w[i].p, 0, home, NULL), 0);
        if (!w[i].slab && w[i].place >= 0)
            fuzz_all_up(pool, w[i].p);
        w[i].p[0] ^= 1; /* every end of it is memory */
        w[i].p[w[i].size - 1] ^= 1;
        FUZZ_RC(ump_release(pool, w[i].p, 0), 0);
    }
    for (size_t i = 0; i < n; i++)
        FUZZ_RC(w[i].place == CKPT_PLACE_HOST ? ump_host_free(pool, w[i].p)
                                              : ump_free(pool, w[i].p),
                0);
    FUZZ_RC(ump_stats(pool, UMP_DEVICE_ALL, &dev), 0);
    FUZZ_RC(ump_stats(pool, UMP_LOC_HOST, &host), 0);
    FUZZ_EQ(dev.live_count + host.live_count, 0);
    FUZZ_EQ(dev.live_bytes + host.live_bytes, 0);
    FUZZ_RC(ump_trim(pool), 0);
    ump_tier_stats_t ht, nt;
    FUZZ_RC(ump_tier_stats(pool, UMP_TIER_HOST, &ht), 0);
    FUZZ_RC(ump_tier_stats(pool, UMP_TIER_NVME, &nt), 0);
    FUZZ_EQ(ht.used_bytes, 0);
    FUZZ_EQ(nt.used_bytes, 0);
    FUZZ_RC(ump_stats(pool, UMP_DEVICE_ALL, &dev), 0);
    FUZZ_EQ(dev.mapped_bytes, 0);
    FUZZ_RC(ump_pool_destroy(pool), 0);
}

static void test_fuzz_index(void **state)
{
    (void)state;
    char good[128], bad[128];
    path_of(good, sizeof(good), "fuzz.ckpt");
    path_of(bad, sizeof(bad), "fuzz-bad.ckpt");
    fuzz_base(good);
    static struct fuzz z;
    int fd = open(good, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &z.h, sizeof(z.h), 0), (ssize_t)sizeof(z.h));
    z.index = malloc(z.h.index_len);
    assert_non_null(z.index);
    assert_int_equal(pread(fd, z.index, z.h.index_len, (off_t)z.h.index_off),
                     (ssize_t)z.h.index_len);
    close(fd);
    z.nf = 0;
    fuzz_fields(&z);
    fuzz_covers(&z);
    uint64_t size = z.h.data_off + z.h.nblocks * z.h.granule;
    copy_file(good, bad, -1, -1);
    /* Once, so that what the process sets up once is there before the
     * counts are taken; the good file restores whole. */
    snprintf(fuzz_what, sizeof(fuzz_what), "the good file");
    ump_pool_t *pool = NULL;
    expect_rc(ump_pool_restore(good, NULL, &pool), 0);
    /* What the checks below look for is there while a pool lives. */
    assert_true(count_pool_maps() > 0);
    assert_false(range_free(z.h.va_base, z.h.va_size));
    fuzz_check_pool(pool, &z.h, z.index);
    int fds = count_fds(), maps = count_pool_maps();
    char *index = malloc(z.h.index_len);
    assert_non_null(index);
    uint64_t seed = FUZZ_SEED;
    unsigned accepted = 0, refused = 0, truncated = 0, nospace = 0, moved = 0;
    for (unsigned m = 0; m < FUZZ_MUTANTS; m++) {
        struct ckpt_header h = z.h;
        memcpy(index, z.index, z.h.index_len);
        /* One field, sometimes two; the live bytes made to agree half of
         * the time (else nearly every size is refused by their sum). */
        unsigned nmut = rnd(&seed) % 4 == 0 ? 2 : 1;
        bool va = false;
        size_t said = (size_t)snprintf(fuzz_what, sizeof(fuzz_what),
                                       "mutant %u:", m);
        for (unsigned k = 0; k < nmut; k++) {
            /* The header's few fields a quarter of the time. */
            size_t among = rnd(&seed) % 4 ? z.nf : z.nheader;
            const struct field *f = &z.f[rnd(&seed) % among];
            void *at = f->header ? (void *)&h : (void *)index;
            uint64_t v = fuzz_value(&seed, &z, f, get_field(at, f));
            set_field(at, f, v);
            if (said < sizeof(fuzz_what))
                said += (size_t)snprintf(fuzz_what + said,
                                         sizeof(fuzz_what) - said,
                                         " %s at %zu = %#llx", f->name, f->off,
                                         (unsigned long long)v);
            va |= f->header &&
                  (f->off == offsetof(struct ckpt_header, va_base) ||
                   f->off == offsetof(struct ckpt_header, va_size));
        }
        if (rnd(&seed) % 2)
            h.live_bytes = fuzz_live(&h, index, z.h.index_len < h.index_len
                                                    ? z.h.index_len
                                                    : h.index_len);
        /* The file: the good one with this header and index, every crc
         * the format has recomputed (the data's are the data's). */
        fd = open(bad, O_RDWR);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, index, z.h.index_len,
                                (off_t)z.h.index_off),
                         (ssize_t)z.h.index_len);
        h.index_crc = fuzz_crc(fd, h.index_off, h.index_len, size);
        char block[CKPT_HEADER_BLOCK] = {0};
        h.header_crc = 0;
        memcpy(block, &h, sizeof(h));
        h.header_crc = crc32c(0, block, sizeof(block));
        memcpy(block, &h, sizeof(h));
        assert_int_equal(pwrite(fd, block, sizeof(block), 0),
                         (ssize_t)sizeof(block));
        close(fd);
        pool = (ump_pool_t *)0x1;
        struct tu_capture cap;
        char log[4096];
        tu_capture_start(&cap);
        int rc = ump_pool_restore(bad, NULL, &pool);
        tu_capture_stop(&cap, log, sizeof(log));
        if (rc == -EINVAL && tu_count_log_lines(log) != 1)
            fail_msg("%s: refused with %d log lines, not one: %s", fuzz_what,
                     tu_count_log_lines(log), log);
        bool longer = h.granule && (h.nblocks > (UINT64_MAX - h.data_off) /
                                                    h.granule ||
                                    h.data_off + h.nblocks * h.granule > size);
        if (rc == 0) {
            fuzz_check_pool(pool, &h, index);
            accepted++;
        } else if (rc == -EINVAL || (rc == -EIO && longer) ||
                   rc == -ENOSPC || (va && (rc == -EADDRINUSE ||
                                            rc == -ENOMEM || rc == -EPERM))) {
            assert_ptr_equal(pool, (ump_pool_t *)0x1);
            refused += rc == -EINVAL;
            truncated += rc == -EIO;
            nospace += rc == -ENOSPC;
            moved += rc != -EINVAL && rc != -EIO && rc != -ENOSPC;
        } else {
            fail_msg("%s: restore = %d (%s)", fuzz_what, rc,
                     ump_strerror(rc));
        }
        /* Nothing left behind, refused or restored and freed: no
         * descriptor, no pool memory mapped, the addresses free. */
        if (count_fds() != fds || count_pool_maps() != maps ||
            !range_free(z.h.va_base, z.h.va_size))
            fail_msg("%s: restore = %d left descriptors (%d, %d before), "
                     "pool memory mapped (%d, %d before) or its addresses "
                     "taken", fuzz_what, rc, count_fds(), fds,
                     count_pool_maps(), maps);
    }
    print_message("fuzz: %u mutants of %zu fields: %u restored whole, %u "
                  "refused (-EINVAL), %u truncated (-EIO), %u fit nowhere, "
                  "%u at taken addresses\n", FUZZ_MUTANTS, z.nf, accepted,
                  refused, truncated, nospace, moved);
    /* Nothing held: the good file still restores whole. */
    snprintf(fuzz_what, sizeof(fuzz_what), "the good file, after");
    expect_rc(ump_pool_restore(good, NULL, &pool), 0);
    fuzz_check_pool(pool, &z.h, z.index);
    free(index);
    free(z.index);
    unlink(good);
    unlink(bad);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 5 && !strcmp(argv[1], "--child")) {
        child_args[0] = argv[2];
        child_args[1] = argv[3];
        child_args[2] = argv[4];
        const struct CMUnitTest t[] = {cmocka_unit_test(test_child)};
        return cmocka_run_group_tests(t, NULL, NULL);
    }
    tu_sim_only("checkpoints are checked on sim here; scripts/gpu-check "
                "runs them on the driver");
    snprintf(dir, sizeof(dir), "/tmp/umpool-ckpt-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_process),
        cmocka_unit_test(test_same_process),
        cmocka_unit_test(test_smaller_machine),
        cmocka_unit_test(test_corrupt_files),
        cmocka_unit_test(test_checkpoint_faults),
        cmocka_unit_test(test_suspend_cycles),
        cmocka_unit_test(test_carved),
        cmocka_unit_test(test_suspend_errors),
        cmocka_unit_test(test_crafted_files),
        cmocka_unit_test(test_size_needs_fewer_granules),
        cmocka_unit_test(test_fuzz_index),
        cmocka_unit_test(test_restore_elsewhere),
        cmocka_unit_test(test_races),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_remove_tree(dir);
    return failed;
}
