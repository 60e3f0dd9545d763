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
#include <sys/stat.h>
#include <sys/wait.h>

#include "testutil.h"

#include "front/ckpt.h"
#include "front/ckpt_format.h"
#include "util/crc32c.h"
#include "tier/offload.h"

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
        data_before_index};
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

/* Lines of /proc/self/maps: a mapping left behind shows here. */
static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    int n = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

/* A restore of path refused with -EINVAL, one log line containing `why`
 * (NULL: any), and nothing left behind: no pool, no descriptor, no
 * mapping. */
static void expect_refused(const char *path, const char *why)
{
    int fds = count_fds(), maps = count_maps();
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
    assert_int_equal(count_maps(), maps);
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
    void *part = alloc_hinted(pool, 6 * MIB, 1, NULL, UMP_HINT_OFFLOAD);
    tu_fill(part, 6 * MIB, 77);
    expect_rc(ump_advise(pool, part, 2 * MIB, UMP_ADVISE_DONTNEED), 0);
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
    /* Its chunks are 4 + 2 MiB: the advice dropped the first whole. The
     * pattern is positional: compared with a fresh copy of it. */
    assert_int_equal(tu_info(pool, part).chunk_size, 4 * MIB);
    char *want = malloc(6 * MIB);
    assert_non_null(want);
    tu_fill(want, 6 * MIB, 77);
    assert_memory_equal((char *)part + 4 * MIB, want + 4 * MIB, 2 * MIB);
    free(want);
    tu_free(pool, part);
    check_restored(pool, &l, live - 6 * MIB);
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
        cmocka_unit_test(test_suspend_errors),
        cmocka_unit_test(test_crafted_files),
        cmocka_unit_test(test_size_needs_fewer_granules),
        cmocka_unit_test(test_restore_elsewhere),
        cmocka_unit_test(test_races),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tu_remove_tree(dir);
    return failed;
}
