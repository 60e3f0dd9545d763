/*
 * umpool-bench offload: the host and NVMe tiers, next to raw baselines
 * timed in the same run.
 *
 * (a) One offloadable allocation of --size bytes on device 0 goes round the
 *     tiers; every move is timed on its own, the median over --reps:
 *       device->host   ump_evict(UMP_TIER_HOST)
 *       host->NVMe     ump_evict(UMP_TIER_NVME) of the host-resident data
 *       NVMe->device   ump_acquire of the NVMe-resident data
 *       device->NVMe   ump_evict(UMP_TIER_NVME) of the device-resident data
 *       NVMe->host     ump_prefetch(UMP_LOC_HOST), then ump_ptr_info polled
 *                      until every chunk is on the host tier
 *       host->device   ump_acquire of the host-resident data
 *     Baselines, each run next to the move it is compared with (before it
 *     in even repetitions, after it in odd ones):
 *     device<->host, memcpy between two prefaulted buffers on sim (the sim
 *     backend's copies are memcpy), cuMemcpyDtoH/HtoD with pinned memory
 *     (cuMemAllocHost) on cuda; host<->NVMe, fio (io_uring, O_DIRECT, 1 MiB
 *     blocks, queue depth 32) when it is in PATH, else the same pattern
 *     through liburing on an O_DIRECT file in the spill directory.
 *     device<->NVMe compares with the slower of its two legs: what a
 *     perfect pipeline of the two would reach.
 * (b) Offloadable tensors, 3x the device budget (device_mem) in all, visited
 *     in order for a few rounds after an untimed one: prefetch the next
 *     ones, acquire, check the last round's value, ump_memset_async,
 *     release. The wall time is set
 *     against the ideal: the bytes ump_stats says moved (spill_bytes and
 *     restore_bytes deltas) at the raw device<->host bandwidths, or the
 *     touches' own time when that is longer (a perfect pipeline hides the
 *     shorter of the two). The raw bandwidths are timed on copies of one
 *     tensor's size, as (a)'s baselines are on (a)'s size (the rate of a
 *     copy depends on its size: glibc's memcpy, for one, changes method
 *     above a fraction of the cache), half right before the rounds and
 *     half right after them, so that a machine whose speed drifts is
 *     measured over the same stretch of time as the loop.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

/* cuda.h at build time only: the driver is loaded at run time (dlopen). */
#if defined(HAVE_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>)
#define OFF_CUDA 1
#include <cuda.h>
#include <dlfcn.h>
#endif
#endif

#include "bench.h"
#include "umpool.h"

#define MiB ((size_t)1 << 20)

#define DEFAULT_SIZE (256 * MiB)
#define CUDA_DEFAULT_SIZE (1024 * MiB) /* with backend:cuda in --config */
#define DEFAULT_REPS 5 /* a noisy machine needs more than 3 */
#define FILL 0x5a /* the contents of (a)'s allocation */

/* The disk pattern of the baselines, fio's and ours. */
#define IO_BLOCK MiB
#define IO_DEPTH 32
#define IO_ALIGN 4096

/* ump_prefetch to the host has no completion call: poll this often. */
#define POLL_NS 20000L
#define POLL_MAX_NS (60 * 1000000000ull)

#define LOOP_PER_BUDGET 4 /* tensors the device budget holds */
#define LOOP_TENSORS (3 * LOOP_PER_BUDGET)
#define LOOP_ROUNDS 3
#define LOOP_PREFETCH 2
#define LOOP_BASE_REPS 12 /* raw copies of one tensor, each way */
#define LOOP_SETTLE_NS 100000000L /* after the rounds: prefetches end */

#define TARGET_XFER 0.9 /* umpool / raw, at least */
#define TARGET_LOOP 1.15 /* wall / ideal, at most */

#define TMPFS_MAGIC_NR 0x01021994 /* statfs f_type of tmpfs */

/* The moves of (a), in the order of the table. */
enum xfer { X_D2H, X_H2D, X_H2N, X_N2H, X_D2N, X_N2D, X_COUNT };

struct xfer_desc {
    const char *key, *label, *call;
    double target; /* 0: none */
};

static const struct xfer_desc xfers[X_COUNT] = {
    {"device_to_host", "device->host", "ump_evict(UMP_TIER_HOST)",
     TARGET_XFER},
    {"host_to_device", "host->device", "ump_acquire", TARGET_XFER},
    {"host_to_nvme", "host->NVMe", "ump_evict(UMP_TIER_NVME)", TARGET_XFER},
    {"nvme_to_host", "NVMe->host", "ump_prefetch(UMP_LOC_HOST) + wait",
     TARGET_XFER},
    {"device_to_nvme", "device->NVMe", "ump_evict(UMP_TIER_NVME)", 0},
    {"nvme_to_device", "NVMe->device", "ump_acquire", 0},
};

/* ---- the spill directory ------------------------------------------------ */

struct spill_dir {
    char path[PATH_MAX];
    bool tmpfs;
    bool tmpdir_skipped; /* $TMPDIR was tmpfs, so /var/tmp is used */
    bool direct;         /* an O_DIRECT write worked there */
    bool uring;          /* this build could set up an io_uring */
    char why[300];       /* why one of the two did not */
};

static bool is_tmpfs(const char *path)
{
    struct statfs fs;

    return statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC_NR;
}

/*
 * A new file in dir, opened O_DIRECT and unlinked, after one 4 KiB direct
 * write went through (some file systems take the flag and refuse the
 * I/O). 0 or a negative errno, with why written.
 */
static int open_direct(const char *dir, int *fd_p, char *why, size_t len)
{
    char path[PATH_MAX];
    void *buf = NULL;
    ssize_t n;
    int tmp, fd, err;

    if (snprintf(path, sizeof(path), "%s/umpool-bench.XXXXXX", dir) >=
        (int)sizeof(path)) {
        snprintf(why, len, "path too long");
        return -ENAMETOOLONG;
    }
    tmp = mkostemp(path, O_CLOEXEC);
    if (tmp < 0) {
        err = errno;
        snprintf(why, len, "cannot create a file in %s: %s", dir,
                 strerror(err));
        return -err;
    }
    fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    err = errno;
    unlink(path);
    close(tmp);
    if (fd < 0) {
        snprintf(why, len, "O_DIRECT refused in %s: %s", dir, strerror(err));
        return -err;
    }
    if (posix_memalign(&buf, IO_ALIGN, IO_ALIGN)) {
        close(fd);
        snprintf(why, len, "out of memory");
        return -ENOMEM;
    }
    memset(buf, 0, IO_ALIGN);
    n = pwrite(fd, buf, IO_ALIGN, 0);
    err = n < 0 ? errno : EIO;
    free(buf);
    if (n != IO_ALIGN) {
        close(fd);
        snprintf(why, len, "an O_DIRECT write failed in %s: %s", dir,
                 strerror(err));
        return -err;
    }
    *fd_p = fd;
    return 0;
}

/* Picks the directory and finds out what the NVMe store can use there
 * (the library decides for itself; this is the same test, made here). */
static void spill_dir_probe(struct spill_dir *d, const char *dir)
{
    const char *tmpdir = getenv("TMPDIR");
    int fd;

    memset(d, 0, sizeof(*d));
    if (!dir) {
        /* tmpfs is memory: spilling there measures no disk (and most
         * kernels refuse O_DIRECT on it). */
        if (tmpdir && *tmpdir && !strchr(tmpdir, ',')) {
            if (!is_tmpfs(tmpdir))
                dir = tmpdir;
            else
                d->tmpdir_skipped = true;
        }
        if (!dir)
            dir = "/var/tmp";
    }
    snprintf(d->path, sizeof(d->path), "%s", dir);
    d->tmpfs = is_tmpfs(dir);
    if (open_direct(dir, &fd, d->why, sizeof(d->why)) < 0)
        return;
    close(fd);
    d->direct = true;
#ifdef HAVE_LIBURING
    struct io_uring ring;
    int rc = io_uring_queue_init(IO_DEPTH, &ring, 0);

    if (rc < 0) {
        snprintf(d->why, sizeof(d->why), "io_uring_queue_init: %s",
                 strerror(-rc));
        return;
    }
    io_uring_queue_exit(&ring);
    d->uring = true;
#else
    snprintf(d->why, sizeof(d->why), "umpool-bench was built without "
             "liburing");
#endif
}

/* ---- device<->host baseline --------------------------------------------- */

#ifdef OFF_CUDA
struct cuda_drv {
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*ctx_retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*ctx_release)(CUdevice dev);
    CUresult (*ctx_set_current)(CUcontext ctx);
    CUresult (*mem_alloc)(CUdeviceptr *dptr, size_t size);
    CUresult (*mem_free)(CUdeviceptr dptr);
    CUresult (*mem_alloc_host)(void **p, size_t size);
    CUresult (*mem_free_host)(void *p);
    CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t size);
    CUresult (*htod)(CUdeviceptr dst, const void *src, size_t size);
    CUresult (*error_name)(CUresult err, const char **name);
    CUdevice dev;
    bool retained;
};

struct drv_sym {
    const char *name;
    size_t off;
};

#define DRV_SYM(name, field) {name, offsetof(struct cuda_drv, field)}
static const struct drv_sym drv_syms[] = {
    DRV_SYM("cuGetErrorName", error_name),
    DRV_SYM("cuInit", init),
    DRV_SYM("cuDeviceGet", device_get),
    DRV_SYM("cuDevicePrimaryCtxRetain", ctx_retain),
    DRV_SYM("cuDevicePrimaryCtxRelease_v2", ctx_release),
    DRV_SYM("cuCtxSetCurrent", ctx_set_current),
    DRV_SYM("cuMemAlloc_v2", mem_alloc),
    DRV_SYM("cuMemFree_v2", mem_free),
    DRV_SYM("cuMemAllocHost_v2", mem_alloc_host),
    DRV_SYM("cuMemFreeHost", mem_free_host),
    DRV_SYM("cuMemcpyDtoH_v2", dtoh),
    DRV_SYM("cuMemcpyHtoD_v2", htod),
};
#undef DRV_SYM
#endif

/* memcpy between two buffers on sim, pinned cuMemcpy on cuda. */
struct copy_base {
    bool ok;
    bool cuda;
    const char *name; /* short, for the table */
    char why[300];
    size_t size;
    void *dev, *host; /* sim: the two buffers */
#ifdef OFF_CUDA
    struct cuda_drv drv;
    CUdeviceptr dptr;
#endif
};

#ifdef OFF_CUDA
static const char *drv_err(const struct cuda_drv *drv, CUresult r)
{
    const char *name = NULL;

    if (drv->error_name && drv->error_name(r, &name) == CUDA_SUCCESS &&
        name)
        return name;
    return "unknown CUDA error";
}

/* Loads the driver and makes device 0's primary context current here (the
 * one the pool uses); c->why says what failed. The library stays loaded. */
static int cuda_drv_load(struct copy_base *c)
{
    struct cuda_drv *drv = &c->drv;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *what;
    CUcontext ctx;
    CUresult r;

    if (!h) {
        snprintf(c->why, sizeof(c->why), "libcuda.so.1 could not be loaded");
        return -ENOENT;
    }
    for (size_t i = 0; i < sizeof(drv_syms) / sizeof(drv_syms[0]); i++) {
        void *fn = dlsym(h, drv_syms[i].name);

        if (!fn) {
            snprintf(c->why, sizeof(c->why), "libcuda.so.1 has no %s",
                     drv_syms[i].name);
            drv->error_name = NULL;
            return -ENOENT;
        }
        /* POSIX: data and function pointers have the same size. */
        memcpy((char *)drv + drv_syms[i].off, &fn, sizeof(fn));
    }
    if ((r = drv->init(0)) != CUDA_SUCCESS) {
        what = "cuInit";
        goto fail;
    }
    if ((r = drv->device_get(&drv->dev, 0)) != CUDA_SUCCESS) {
        what = "cuDeviceGet";
        goto fail;
    }
    if ((r = drv->ctx_retain(&ctx, drv->dev)) != CUDA_SUCCESS) {
        what = "cuDevicePrimaryCtxRetain";
        goto fail;
    }
    drv->retained = true;
    if ((r = drv->ctx_set_current(ctx)) != CUDA_SUCCESS) {
        what = "cuCtxSetCurrent";
        goto fail;
    }
    return 0;
fail:
    snprintf(c->why, sizeof(c->why), "%s: %s", what, drv_err(drv, r));
    return -EIO;
}

static void cuda_copy_setup(struct copy_base *c)
{
    struct cuda_drv *drv = &c->drv;
    CUresult r;

    if (cuda_drv_load(c))
        return;
    if ((r = drv->mem_alloc(&c->dptr, c->size)) != CUDA_SUCCESS) {
        snprintf(c->why, sizeof(c->why), "cuMemAlloc of %zu bytes: %s",
                 c->size, drv_err(drv, r));
        return;
    }
    if ((r = drv->mem_alloc_host(&c->host, c->size)) != CUDA_SUCCESS) {
        snprintf(c->why, sizeof(c->why), "cuMemAllocHost of %zu bytes: %s",
                 c->size, drv_err(drv, r));
        c->host = NULL;
        return;
    }
    memset(c->host, FILL, c->size);
    c->ok = true;
}
#endif

static void copy_setup(struct copy_base *c, bool cuda, size_t size)
{
    memset(c, 0, sizeof(*c));
    c->size = size;
    c->cuda = cuda;
    if (cuda) {
        c->name = "cuMemcpy";
#ifdef OFF_CUDA
        cuda_copy_setup(c);
#else
        snprintf(c->why, sizeof(c->why), "umpool-bench was built without "
                 "cuda.h");
#endif
        return;
    }
    c->name = "memcpy";
    c->dev = malloc(size);
    c->host = malloc(size);
    if (!c->dev || !c->host) {
        snprintf(c->why, sizeof(c->why), "out of memory");
        return;
    }
    /* Faulted in now: the pool's chunks are backed before they move. */
    memset(c->dev, FILL, size);
    memset(c->host, ~FILL & 0xff, size);
    c->ok = true;
}

static void copy_cleanup(struct copy_base *c)
{
#ifdef OFF_CUDA
    if (c->drv.retained) {
        if (c->host)
            c->drv.mem_free_host(c->host);
        if (c->dptr)
            c->drv.mem_free(c->dptr);
        c->drv.ctx_release(c->drv.dev);
        return;
    }
#endif
    free(c->dev);
    free(c->host);
}

/* One copy of c->size bytes, timed into *ns_p; on failure c->ok goes
 * false with why set. */
static void copy_run(struct copy_base *c, bool to_host, double *ns_p)
{
    uint64_t t0 = now_ns();

#ifdef OFF_CUDA
    if (c->drv.retained) {
        CUresult r = to_host ? c->drv.dtoh(c->host, c->dptr, c->size)
                             : c->drv.htod(c->dptr, c->host, c->size);

        if (r != CUDA_SUCCESS) {
            snprintf(c->why, sizeof(c->why), "%s: %s",
                     to_host ? "cuMemcpyDtoH" : "cuMemcpyHtoD",
                     drv_err(&c->drv, r));
            c->ok = false;
            return;
        }
        *ns_p = (double)(now_ns() - t0);
        return;
    }
#endif
    if (to_host)
        memcpy(c->host, c->dev, c->size);
    else
        memcpy(c->dev, c->host, c->size);
    *ns_p = (double)(now_ns() - t0);
}

/* ---- host<->NVMe baseline ----------------------------------------------- */

enum disk_kind { DISK_NONE, DISK_FIO, DISK_URING };

struct disk_base {
    enum disk_kind kind;
    bool ok;
    char why[600];
    char fio[PATH_MAX];  /* fio's path */
    char file[PATH_MAX]; /* fio's file */
    int fd;              /* ours: an O_DIRECT file, unlinked */
    void *bufs[IO_DEPTH];
};

/* name's path from $PATH into out; false when it is not there. */
static bool find_in_path(const char *name, char *out, size_t len)
{
    const char *p = getenv("PATH");

    while (p && *p) {
        size_t n = strcspn(p, ":");

        if (n && snprintf(out, len, "%.*s/%s", (int)n, p, name) < (int)len &&
            access(out, X_OK) == 0)
            return true;
        p += n;
        if (*p)
            p++;
    }
    return false;
}

/* The bw_bytes of the "read" or "write" object in fio's JSON output. */
static bool fio_bw(const char *out, const char *rw, double *bps_p)
{
    char key[16];

    snprintf(key, sizeof(key), "\"%s\"", rw);
    for (const char *p = strstr(out, key); p; p = strstr(p + 1, key)) {
        const char *q = p + strlen(key), *b;
        unsigned long long v;
        char *end;

        q += strspn(q, " \t\r\n");
        if (*q++ != ':')
            continue; /* a value, like "rw" : "read" */
        q += strspn(q, " \t\r\n");
        if (*q != '{')
            continue;
        b = strstr(q, "\"bw_bytes\"");
        if (!b)
            return false;
        b += strlen("\"bw_bytes\"");
        b += strspn(b, " \t\r\n:");
        errno = 0;
        v = strtoull(b, &end, 10);
        if (end == b || errno || v == 0)
            return false;
        *bps_p = (double)v;
        return true;
    }
    return false;
}

/* fio's standard output, whole, into a new string (*out_p, freed by the
 * caller); 0 or a negative errno. */
static int read_all(int fd, char **out_p)
{
    size_t len = 0, cap = 64 * 1024;
    char *buf = malloc(cap);

    if (!buf)
        return -ENOMEM;
    for (;;) {
        ssize_t n;

        if (cap - len < 4096) {
            char *nb = realloc(buf, cap * 2);

            if (!nb) {
                free(buf);
                return -ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *out_p = buf;
    return 0;
}

/* One fio run over size bytes of d->file; its bandwidth, as the time of
 * size bytes, into *ns_p. 0, or a negative errno with why set. */
static int fio_pass(struct disk_base *d, size_t size, bool write,
                    double *ns_p)
{
    char fn[PATH_MAX + 16], sz[48];
    char *argv[] = {"fio", "--name=umpool-bench", fn, "--ioengine=io_uring",
                    "--direct=1", "--bs=1M", "--iodepth=32",
                    write ? "--rw=write" : "--rw=read", sz,
                    "--output-format=json", NULL};
    posix_spawn_file_actions_t fa;
    char *out = NULL;
    double bps;
    int pfd[2], status, rc;
    pid_t pid;

    snprintf(fn, sizeof(fn), "--filename=%s", d->file);
    snprintf(sz, sizeof(sz), "--size=%zu", size);
    if (pipe2(pfd, O_CLOEXEC)) {
        rc = -errno;
        snprintf(d->why, sizeof(d->why), "pipe: %s", strerror(-rc));
        return rc;
    }
    /* posix_spawn, not fork: the pool's threads and fork handlers stay out
     * of it. fio's stderr is ours, so that its complaints show. */
    rc = posix_spawn_file_actions_init(&fa);
    if (!rc)
        rc = posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
    if (!rc)
        rc = posix_spawn(&pid, d->fio, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc) {
        close(pfd[0]);
        snprintf(d->why, sizeof(d->why), "cannot run fio: %s",
                 strerror(rc));
        return -rc;
    }
    rc = read_all(pfd[0], &out);
    close(pfd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc) {
        snprintf(d->why, sizeof(d->why), "reading fio's output: %s",
                 strerror(-rc));
    } else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        snprintf(d->why, sizeof(d->why), "fio %s exited %d", argv[7],
                 WIFEXITED(status) ? WEXITSTATUS(status)
                                   : 128 + WTERMSIG(status));
        rc = -EIO;
    } else if (!fio_bw(out, write ? "write" : "read", &bps)) {
        snprintf(d->why, sizeof(d->why), "no %s bw_bytes in fio's JSON "
                 "output", write ? "write" : "read");
        rc = -EPROTO;
    } else {
        *ns_p = (double)size * 1e9 / bps;
    }
    free(out);
    return rc;
}

#ifdef HAVE_LIBURING
/* size bytes between d->fd and the buffers in IO_BLOCK requests, IO_DEPTH
 * in flight; the time from the first submission to the last completion
 * into *ns_p. 0 or a negative errno. */
static int uring_pass(struct disk_base *d, size_t size, bool write,
                      double *ns_p)
{
    size_t blocks = size / IO_BLOCK, next = 0, done = 0;
    int idle[IO_DEPTH], nidle = IO_DEPTH;
    struct io_uring ring;
    uint64_t t0;
    int rc = io_uring_queue_init(IO_DEPTH, &ring, 0);

    if (rc < 0)
        return rc;
    for (int i = 0; i < IO_DEPTH; i++)
        idle[i] = i;
    t0 = now_ns();
    while (done < blocks) {
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;

        while (nidle && next < blocks) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            int b = idle[--nidle];

            if (write)
                io_uring_prep_write(sqe, d->fd, d->bufs[b], IO_BLOCK,
                                    next * IO_BLOCK);
            else
                io_uring_prep_read(sqe, d->fd, d->bufs[b], IO_BLOCK,
                                   next * IO_BLOCK);
            sqe->user_data = (uint64_t)b;
            next++;
        }
        rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0)
            goto out;
        rc = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            if (cqe->res != (int)IO_BLOCK && !rc)
                rc = cqe->res < 0 ? cqe->res : -EIO;
            idle[nidle++] = (int)cqe->user_data;
            seen++;
        }
        io_uring_cq_advance(&ring, seen);
        done += seen;
        if (rc)
            goto out;
    }
    *ns_p = (double)(now_ns() - t0);
out:
    io_uring_queue_exit(&ring);
    return rc;
}
#endif

/* fio when it is in PATH, else our io_uring loop, else nothing (why). */
static void disk_setup(struct disk_base *d, const struct spill_dir *dir,
                       size_t size)
{
    memset(d, 0, sizeof(*d));
    d->fd = -1;
    if (find_in_path("fio", d->fio, sizeof(d->fio))) {
        if (snprintf(d->file, sizeof(d->file), "%s/umpool-bench-fio.%ld",
                     dir->path, (long)getpid()) >= (int)sizeof(d->file)) {
            snprintf(d->why, sizeof(d->why), "path too long");
            return;
        }
        d->kind = DISK_FIO;
        d->ok = true;
        return;
    }
#ifdef HAVE_LIBURING
    char why[300];

    if (!dir->direct || !dir->uring) {
        snprintf(d->why, sizeof(d->why), "fio is not in PATH, and %s",
                 dir->why);
        return;
    }
    if (open_direct(dir->path, &d->fd, why, sizeof(why)) < 0) {
        snprintf(d->why, sizeof(d->why), "fio is not in PATH, and %s", why);
        return;
    }
    for (int i = 0; i < IO_DEPTH; i++) {
        if (posix_memalign(&d->bufs[i], IO_ALIGN, IO_BLOCK)) {
            d->bufs[i] = NULL;
            snprintf(d->why, sizeof(d->why), "out of memory");
            return;
        }
        memset(d->bufs[i], FILL, IO_BLOCK);
    }
    /* Laid out ahead, as fio does and as the NVMe store grows its files. */
    if (fallocate(d->fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP) {
        snprintf(d->why, sizeof(d->why), "fallocate of %zu bytes: %s",
                 size, strerror(errno));
        return;
    }
    d->kind = DISK_URING;
    d->ok = true;
#else
    (void)size;
    snprintf(d->why, sizeof(d->why), "fio is not in PATH, and umpool-bench "
             "was built without liburing");
#endif
}

static void disk_cleanup(struct disk_base *d)
{
    if (d->kind == DISK_FIO)
        unlink(d->file);
    if (d->fd >= 0)
        close(d->fd);
    for (int i = 0; i < IO_DEPTH; i++)
        free(d->bufs[i]);
}

/* One pass of size bytes; on failure d->ok goes false with why set. */
static void disk_run(struct disk_base *d, size_t size, bool write,
                     double *ns_p)
{
    int rc = -EINVAL;

    if (d->kind == DISK_FIO)
        rc = fio_pass(d, size, write, ns_p);
#ifdef HAVE_LIBURING
    else if (d->kind == DISK_URING) {
        rc = uring_pass(d, size, write, ns_p);
        if (rc)
            snprintf(d->why, sizeof(d->why), "io_uring %s: %s",
                     write ? "write" : "read", strerror(-rc));
    }
#endif
    if (rc)
        d->ok = false;
}

static const char *disk_name(const struct disk_base *d)
{
    switch (d->kind) {
    case DISK_FIO:
        return "fio";
    case DISK_URING:
        return "io_uring";
    default:
        return "none";
    }
}

/* ---- the run ------------------------------------------------------------ */

struct loop_res {
    size_t capacity; /* device 0's, as ump_stats gives it */
    size_t tensor;
    int tensors, rounds;
    double wall_s;
    double first_s;               /* the untimed round */
    double acquire_s, prefetch_s; /* inside those calls, of wall_s */
    uint64_t spill_bytes, restore_bytes, evictions;
    double touch_gbs;         /* ump_memset_async on a resident tensor */
    double base_ns[2][LOOP_BASE_REPS]; /* raw copies of one tensor: */
    double d2h_gbs, h2d_gbs;           /* device->host, host->device */
    char why[300];                     /* why there are none */
    double transfer_s, touch_s, ideal_s;
    bool ideal_ok; /* the raw copies ran */
    bool nvme_used; /* the NVMe tier held data: the ideal is a lower bound */
};

struct off {
    const struct bench_offload_opts *o;
    size_t size, budget;
    int reps;
    struct spill_dir dir;
    char engine[64];    /* what the NVMe store should use, and why */
    char *config;       /* (a)'s pool */
    char *loop_config;  /* (b)'s pool */
    const char *backend;
    struct copy_base copy;
    struct disk_base disk;
    ump_pool_t *pool;
    ump_stream_t stream;
    void *p; /* (a)'s allocation */
    double ump_ns[X_COUNT][BENCH_OFFLOAD_MAX_REPS];
    double base_ns[X_COUNT][BENCH_OFFLOAD_MAX_REPS];
    double ump_gbs[X_COUNT], base_gbs[X_COUNT];
    bool base_ok[X_COUNT];
    struct loop_res loop;
};

static int fail(const char *what, int rc)
{
    fprintf(stderr, "umpool-bench: offload: %s: %s\n", what,
            ump_strerror(rc));
    return 1;
}

/* The value of the last "key:value" item of a config string into buf;
 * false when the key is not there. */
static bool conf_value(const char *config, const char *key, char *buf,
                       size_t len)
{
    size_t klen = strlen(key);
    bool found = false;

    for (const char *p = config; p && *p;) {
        size_t n = strcspn(p, ",");

        if (n > klen && !strncmp(p, key, klen) && p[klen] == ':') {
            snprintf(buf, len, "%.*s", (int)(n - klen - 1), p + klen + 1);
            found = true;
        }
        p += n;
        if (*p)
            p++;
    }
    return found;
}

/* The scenario's keys, then the user's: theirs win, key by key. */
static char *join_config(const char *own, const char *user)
{
    char *s;

    if (asprintf(&s, "%s%s%s", own, user && *user ? "," : "",
                 user ? user : "") < 0)
        return NULL;
    return s;
}

static int make_configs(struct off *x)
{
    const char *user = x->o->config;
    char own[PATH_MAX + 512], val[64];

    if (user && conf_value(user, "nvme_dir", val, sizeof(val))) {
        fprintf(stderr, "umpool-bench: offload: give the spill directory "
                "with --dir, not nvme_dir in --config\n");
        return 1;
    }
    /* log_level info: the NVMe store says so when it cannot use io_uring. */
    snprintf(own, sizeof(own), "backend:sim,sim_devices:1,sim_device_mem:%zu,"
             "host_limit:%zu,nvme_dir:%s,log_level:info", 2 * x->size,
             2 * x->size, x->dir.path);
    x->config = join_config(own, user);
    /* Room on the host for every tensor: the loop measures device<->host. */
    snprintf(own, sizeof(own), "backend:sim,sim_devices:1,sim_device_mem:%zu,"
             "device_mem:%zu,host_limit:%zu,nvme_dir:%s", x->budget,
             x->budget, 4 * x->budget, x->dir.path);
    x->loop_config = join_config(own, user);
    if (!x->config || !x->loop_config)
        return fail("config", -ENOMEM);
    if (user && conf_value(user, "nvme_engine", val, sizeof(val)) &&
        strcmp(val, "auto")) {
        snprintf(x->engine, sizeof(x->engine), "%.20s (nvme_engine)", val);
        return 0;
    }
    snprintf(x->engine, sizeof(x->engine), "%s",
             x->dir.direct && x->dir.uring ? "io_uring" : "threads");
    return 0;
}

/* Reads back one byte every stride bytes of [p, p + size), and the last,
 * through the stream; 0, -EILSEQ when one is not want, or the pool's
 * error. */
static int check_bytes(ump_pool_t *pool, ump_stream_t s, const void *p,
                       size_t size, size_t stride, unsigned char want)
{
    size_t n = (size - 1) / stride + 2;
    unsigned char *b = calloc(n, 1);
    int rc = b ? 0 : -ENOMEM;

    for (size_t i = 0; !rc && i < n; i++) {
        size_t off = i + 1 < n ? i * stride : size - 1;

        rc = ump_memcpy_async(pool, &b[i], (const char *)p + off, 1, s);
    }
    if (!rc)
        rc = ump_stream_synchronize(pool, s);
    for (size_t i = 0; !rc && i < n; i++)
        if (b[i] != want)
            rc = -EILSEQ;
    free(b);
    return rc;
}

/*
 * Checks that every chunk of [p, p + size) is on tier want: 0, or -EPROTO
 * with the tier found in *found_p. With wait, a chunk still on NVMe is
 * polled until it leaves (a chunk on its way counts where its data still
 * is): the end of a ump_prefetch, which has no call of its own to wait
 * with; -ETIMEDOUT after POLL_MAX_NS.
 */
static int tier_walk(ump_pool_t *pool, char *p, size_t size, int want,
                     bool wait, int *found_p)
{
    const struct timespec pause = {0, POLL_NS};
    uint64_t deadline = now_ns() + POLL_MAX_NS;
    size_t off = 0;

    while (off < size) {
        ump_ptr_info_t info;
        size_t next;
        int rc = ump_ptr_info(pool, p + off, &info);

        if (rc)
            return rc;
        if (wait && info.tier == UMP_TIER_NVME && want != UMP_TIER_NVME) {
            if (now_ns() > deadline)
                return -ETIMEDOUT;
            nanosleep(&pause, NULL);
            continue;
        }
        if (info.tier != want) {
            *found_p = info.tier;
            return -EPROTO;
        }
        next = (size_t)((char *)info.chunk_base + info.chunk_size - p);
        if (next <= off)
            return -EPROTO;
        off = next;
    }
    return 0;
}

enum op { OP_EVICT_HOST, OP_EVICT_NVME, OP_ACQUIRE, OP_PREFETCH_HOST };

/* One ump call on (a)'s allocation, timed into *ns_p, then a check that
 * the data is where the call was to put it (a move that did not happen
 * would show as a fast one); an acquire is released after that. 0, or 1
 * after printing why. */
static int ump_timed(struct off *x, enum op op, double *ns_p)
{
    static const int want[] = {UMP_TIER_HOST, UMP_TIER_NVME, UMP_TIER_DEVICE,
                               UMP_TIER_HOST};
    const char *what = "";
    uint64_t t0 = now_ns(), t1;
    int rc = 0, found = -1;

    switch (op) {
    case OP_EVICT_HOST:
        what = "ump_evict(UMP_TIER_HOST)";
        rc = ump_evict(x->pool, x->p, 0, UMP_TIER_HOST);
        break;
    case OP_EVICT_NVME:
        what = "ump_evict(UMP_TIER_NVME)";
        rc = ump_evict(x->pool, x->p, 0, UMP_TIER_NVME);
        break;
    case OP_ACQUIRE:
        what = "ump_acquire";
        rc = ump_acquire(x->pool, x->p, 0, 0, NULL);
        break;
    case OP_PREFETCH_HOST:
        what = "ump_prefetch(UMP_LOC_HOST)";
        rc = ump_prefetch(x->pool, x->p, 0, UMP_LOC_HOST, NULL);
        if (!rc)
            rc = tier_walk(x->pool, x->p, x->size, UMP_TIER_HOST, true,
                           &found);
        break;
    }
    t1 = now_ns();
    if (!rc)
        rc = tier_walk(x->pool, x->p, x->size, want[op], false, &found);
    if (rc == -EPROTO && found >= 0) {
        fprintf(stderr, "umpool-bench: offload: after %s, a chunk is on "
                "tier %d, not %d\n", what, found, want[op]);
        return 1;
    }
    if (rc)
        return fail(what, rc);
    *ns_p = (double)(t1 - t0);
    if (op == OP_ACQUIRE && (rc = ump_release(x->pool, x->p, 0)))
        return fail("ump_release", rc);
    return 0;
}

/* The raw transfer that dir is compared with, next to it. */
static void base_timed(struct off *x, enum xfer dir, int r)
{
    double *ns = &x->base_ns[dir][r];

    switch (dir) {
    case X_D2H:
    case X_H2D:
        if (x->copy.ok)
            copy_run(&x->copy, dir == X_D2H, ns);
        break;
    case X_H2N:
    case X_N2H:
        if (x->disk.ok)
            disk_run(&x->disk, x->size, dir == X_H2N, ns);
        break;
    default:
        break;
    }
}

/* Every move once, from and back to the device (released), each next to
 * its baseline. Each step starts where the one before left the data. */
static int xfer_rep(struct off *x, int r)
{
    static const struct {
        enum xfer dir;
        enum op op;
    } steps[] = {
        {X_D2H, OP_EVICT_HOST}, {X_H2N, OP_EVICT_NVME},
        {X_N2D, OP_ACQUIRE},    {X_D2N, OP_EVICT_NVME},
        {X_N2H, OP_PREFETCH_HOST}, {X_H2D, OP_ACQUIRE},
    };

    /* Which of the two goes first alternates: a disk (or a virtual one
     * with a cache in front) is often slower for the second of two writes
     * in a row, and neither side should always be the second. */
    bool base_first = r % 2 == 0;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (base_first)
            base_timed(x, steps[i].dir, r);
        if (ump_timed(x, steps[i].op, &x->ump_ns[steps[i].dir][r]))
            return 1;
        if (!base_first)
            base_timed(x, steps[i].dir, r);
    }
    return 0;
}

/* Medians and GB/s (bytes per ns) of every row (the times get sorted). */
static void xfer_results(struct off *x)
{
    static const enum xfer legs[][3] = {{X_D2N, X_D2H, X_H2N},
                                        {X_N2D, X_N2H, X_H2D}};
    double bytes = (double)x->size;

    for (int d = 0; d < X_COUNT; d++)
        x->ump_gbs[d] = bytes / median(x->ump_ns[d], (size_t)x->reps);
    x->base_ok[X_D2H] = x->base_ok[X_H2D] = x->copy.ok;
    x->base_ok[X_H2N] = x->base_ok[X_N2H] = x->disk.ok;
    for (size_t l = 0; l < 2; l++) {
        enum xfer d = legs[l][0], a = legs[l][1], b = legs[l][2];

        x->base_ok[d] = x->base_ok[a] && x->base_ok[b];
        for (int r = 0; x->base_ok[d] && r < x->reps; r++)
            x->base_ns[d][r] = x->base_ns[a][r] > x->base_ns[b][r]
                                   ? x->base_ns[a][r] : x->base_ns[b][r];
    }
    for (int d = 0; d < X_COUNT; d++)
        if (x->base_ok[d])
            x->base_gbs[d] = bytes / median(x->base_ns[d], (size_t)x->reps);
}

/* Part (a): the pool, the allocation, the repetitions. 0, or 1. */
static int xfer_run(struct off *x)
{
    ump_hints_t hints = UMP_HINTS_INIT;
    int ret = 1, rc;

    rc = ump_pool_create(x->config, &x->pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: offload: ump_pool_create(\"%s\"): "
                "%s\n", x->config, ump_strerror(rc));
        return 1;
    }
    x->backend = ump_backend_name(x->pool);
    copy_setup(&x->copy, !strcmp(x->backend, "cuda"), x->size);
    disk_setup(&x->disk, &x->dir, x->size);
    rc = ump_stream_create(x->pool, 0, &x->stream);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_pool;
    }
    hints.device = 0;
    hints.flags = UMP_HINT_OFFLOAD;
    rc = ump_alloc(x->pool, x->size, &hints, &x->p);
    if (rc) {
        fail("ump_alloc", rc);
        goto out_stream;
    }
    rc = ump_memset_async(x->pool, x->p, FILL, x->size, x->stream);
    if (!rc)
        rc = ump_stream_synchronize(x->pool, x->stream);
    if (rc) {
        fail("ump_memset_async", rc);
        goto out_free;
    }
    for (int r = 0; r < x->reps; r++)
        if (xfer_rep(x, r))
            goto out_free;
    rc = ump_acquire(x->pool, x->p, 0, 0, x->stream);
    if (rc) {
        fail("ump_acquire", rc);
        goto out_free;
    }
    rc = check_bytes(x->pool, x->stream, x->p, x->size, MiB, FILL);
    ump_release(x->pool, x->p, 0);
    if (rc) {
        fail(rc == -EILSEQ ? "data changed by the moves" : "reading back",
             rc);
        goto out_free;
    }
    xfer_results(x);
    ret = 0;
out_free:
    rc = ump_free(x->pool, x->p);
    if (rc)
        ret = fail("ump_free", rc);
out_stream:
    ump_stream_destroy(x->pool, x->stream);
out_pool:
    rc = ump_pool_destroy(x->pool);
    if (rc)
        ret = fail("ump_pool_destroy", rc);
    x->pool = NULL;
    return ret;
}

static unsigned char loop_val(int tensor, int round)
{
    return (unsigned char)(1 + (tensor * 31 + round * 7) % 255);
}

/* Touches tensor i of round `round` as a training step would: acquire
 * (timed into *acq_ns), check the previous round's value, memset, release.
 * 0, or 1 after printing why. */
static int loop_visit(ump_pool_t *pool, ump_stream_t s, void **t,
                      size_t size, int i, int round, uint64_t *acq_ns)
{
    uint64_t t0 = now_ns();
    int rc = ump_acquire(pool, t[i], 0, 0, s);

    *acq_ns += now_ns() - t0;
    if (rc)
        return fail("ump_acquire", rc);
    if (round > 0 &&
        (rc = check_bytes(pool, s, t[i], size, size,
                          loop_val(i, round - 1)))) {
        ump_release(pool, t[i], 0);
        return fail(rc == -EILSEQ ? "a tensor lost its data" : "reading back",
                    rc);
    }
    rc = ump_memset_async(pool, t[i], loop_val(i, round), size, s);
    if (!rc)
        rc = ump_stream_synchronize(pool, s);
    ump_release(pool, t[i], 0);
    return rc ? fail("ump_memset_async", rc) : 0;
}

/* The memset rate of a resident tensor (the last one touched): what the
 * touches cost without any move. 0, or 1 after printing why. */
static int loop_touch_rate(struct off *x, ump_pool_t *pool, ump_stream_t s,
                           void *t, double *gbs_p)
{
    double ns[BENCH_OFFLOAD_MAX_REPS];
    int rc = ump_acquire(pool, t, 0, 0, s);

    if (rc)
        return fail("ump_acquire", rc);
    for (int r = 0; !rc && r < x->reps; r++) {
        uint64_t t0 = now_ns();

        rc = ump_memset_async(pool, t, loop_val(LOOP_TENSORS - 1, 0),
                              x->loop.tensor, s);
        if (!rc)
            rc = ump_stream_synchronize(pool, s);
        ns[r] = (double)(now_ns() - t0);
    }
    ump_release(pool, t, 0);
    if (rc)
        return fail("ump_memset_async", rc);
    *gbs_p = (double)x->loop.tensor / median(ns, (size_t)x->reps);
    return 0;
}

/* The raw device<->host copies of one tensor through c (set up for that
 * size): reps [from, to) of each direction, alternating, into
 * res->base_ns. A failure leaves c->ok false, with c->why. */
static void loop_base(struct loop_res *res, struct copy_base *c, int from,
                      int to)
{
    for (int r = from; c->ok && r < to; r++) {
        copy_run(c, true, &res->base_ns[0][r]);
        if (c->ok)
            copy_run(c, false, &res->base_ns[1][r]);
    }
}

/* One untimed round of the loop, then the timed rounds between two
 * ump_stats. 0, or 1 after printing why. */
static int loop_rounds(struct off *x, ump_pool_t *pool, ump_stream_t s,
                       ump_stream_t cs, void **t)
{
    struct loop_res *res = &x->loop;
    ump_stats_t before, after;
    ump_tier_stats_t nvme;
    uint64_t t0 = now_ns(), t1, acq = 0, pre = 0;
    int rc = 0;

    for (int r = 1; r <= 1 + LOOP_ROUNDS; r++) {
        /* The first round brings the pool to its steady state (the host
         * chunks the cycle needs made, both workers running), as the first
         * steps of a training run do; the timed ones repeat it. */
        if (r == 2) {
            res->first_s = (double)(now_ns() - t0) / 1e9;
            if ((rc = ump_stats(pool, UMP_DEVICE_ALL, &before)))
                return fail("ump_stats", rc);
            acq = pre = 0;
            t0 = now_ns();
        }
        for (int i = 0; i < LOOP_TENSORS; i++) {
            /* On their own stream, as a training loop's copies are. */
            t1 = now_ns();
            for (int k = 1; !rc && k <= LOOP_PREFETCH; k++)
                rc = ump_prefetch(pool, t[(i + k) % LOOP_TENSORS], 0, 0, cs);
            pre += now_ns() - t1;
            if (rc)
                return fail("ump_prefetch", rc);
            if (loop_visit(pool, s, t, res->tensor, i, r, &acq))
                return 1;
        }
    }
    res->wall_s = (double)(now_ns() - t0) / 1e9;
    res->acquire_s = (double)acq / 1e9;
    res->prefetch_s = (double)pre / 1e9;
    rc = ump_stats(pool, UMP_DEVICE_ALL, &after);
    if (!rc)
        rc = ump_tier_stats(pool, UMP_TIER_NVME, &nvme);
    if (rc)
        return fail("ump_stats", rc);
    res->spill_bytes = after.spill_bytes - before.spill_bytes;
    res->restore_bytes = after.restore_bytes - before.restore_bytes;
    res->evictions = after.evictions - before.evictions;
    res->nvme_used = nvme.peak_bytes > 0;
    return 0;
}

/* Part (b). 0, or 1 after printing why. */
static int loop_run(struct off *x)
{
    struct loop_res *res = &x->loop;
    struct copy_base base = {0}; /* the raw copies of one tensor */
    ump_hints_t hints = UMP_HINTS_INIT;
    void *t[LOOP_TENSORS] = {0};
    ump_stream_t s, cs;
    ump_pool_t *pool;
    ump_stats_t st;
    uint64_t untimed = 0;
    int ret = 1, rc;

    res->tensor = x->budget / LOOP_PER_BUDGET;
    res->tensors = LOOP_TENSORS;
    res->rounds = LOOP_ROUNDS;
    rc = ump_pool_create(x->loop_config, &pool);
    if (rc) {
        fprintf(stderr, "umpool-bench: offload: ump_pool_create(\"%s\"): "
                "%s\n", x->loop_config, ump_strerror(rc));
        return 1;
    }
    rc = ump_stats(pool, 0, &st);
    if (rc) {
        fail("ump_stats", rc);
        goto out_pool;
    }
    res->capacity = st.capacity;
    rc = ump_stream_create(pool, 0, &s);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_pool;
    }
    rc = ump_stream_create(pool, 0, &cs);
    if (rc) {
        fail("ump_stream_create", rc);
        goto out_stream;
    }
    hints.device = 0;
    hints.flags = UMP_HINT_OFFLOAD;
    for (int i = 0; i < LOOP_TENSORS; i++) {
        rc = ump_alloc(pool, res->tensor, &hints, &t[i]);
        if (rc) {
            fail("ump_alloc", rc);
            goto out_free;
        }
    }
    /* Round 0 writes every tensor once: the pool moves them down as the
     * later ones come, so that the timed rounds start in steady state. */
    for (int i = 0; i < LOOP_TENSORS; i++)
        if (loop_visit(pool, s, t, res->tensor, i, 0, &untimed))
            goto out_free;
    if (loop_touch_rate(x, pool, s, t[LOOP_TENSORS - 1], &res->touch_gbs))
        goto out_free;
    copy_setup(&base, x->copy.cuda, res->tensor);
    loop_base(res, &base, 0, LOOP_BASE_REPS / 2);
    if (loop_rounds(x, pool, s, cs, t))
        goto out_free;
    /* The last visits prefetched the first tensors: let that copy end. */
    nanosleep(&(struct timespec){0, LOOP_SETTLE_NS}, NULL);
    loop_base(res, &base, LOOP_BASE_REPS / 2, LOOP_BASE_REPS);
    res->ideal_ok = base.ok;
    if (!base.ok)
        snprintf(res->why, sizeof(res->why), "%s", base.why);
    ret = 0;
out_free:
    copy_cleanup(&base);
    for (int i = 0; i < LOOP_TENSORS; i++) {
        rc = t[i] ? ump_free(pool, t[i]) : 0;
        if (rc)
            ret = fail("ump_free", rc);
    }
    ump_stream_destroy(pool, cs);
out_stream:
    ump_stream_destroy(pool, s);
out_pool:
    rc = ump_pool_destroy(pool);
    if (rc)
        ret = fail("ump_pool_destroy", rc);
    return ret;
}

/* The loop's ideal from its raw bandwidths and the touch rate. */
static void loop_ideal(struct off *x)
{
    struct loop_res *res = &x->loop;
    double touched = (double)res->tensor * LOOP_TENSORS * LOOP_ROUNDS;

    res->touch_s = touched / res->touch_gbs / 1e9;
    if (!res->ideal_ok)
        return;
    res->d2h_gbs = (double)res->tensor / median(res->base_ns[0],
                                                LOOP_BASE_REPS);
    res->h2d_gbs = (double)res->tensor / median(res->base_ns[1],
                                                LOOP_BASE_REPS);
    res->transfer_s = ((double)res->spill_bytes / res->d2h_gbs +
                       (double)res->restore_bytes / res->h2d_gbs) /
                      1e9;
    res->ideal_s = res->transfer_s > res->touch_s ? res->transfer_s
                                                  : res->touch_s;
}

/* ---- output ------------------------------------------------------------- */

static const char *base_label(const struct off *x, enum xfer d)
{
    switch (d) {
    case X_D2H:
    case X_H2D:
        return x->copy.name;
    case X_H2N:
    case X_N2H:
        return disk_name(&x->disk);
    default:
        return "slower leg";
    }
}

static const char *base_why(const struct off *x, enum xfer d)
{
    if (d == X_D2H || d == X_H2D)
        return x->copy.why;
    if (d == X_H2N || d == X_N2H)
        return x->disk.why;
    return !x->copy.ok ? x->copy.why : x->disk.why;
}

static void json_num(double v, bool ok, int prec)
{
    if (ok)
        printf("%.*f", prec, v);
    else
        printf("null");
}

static void print_json(const struct off *x)
{
    const struct loop_res *l = &x->loop;
    bool lok = l->ideal_ok && l->ideal_s > 0;

    printf("{\"scenario\": \"offload\", \"umpool_version\": ");
    json_string(stdout, ump_version_string());
    printf(", \"config\": ");
    json_string(stdout, x->config);
    printf(", \"loop_config\": ");
    json_string(stdout, x->loop_config);
    printf(", \"backend\": ");
    json_string(stdout, x->backend);
    printf(", \"size\": %zu, \"reps\": %d, \"spill_dir\": {\"path\": ",
           x->size, x->reps);
    json_string(stdout, x->dir.path);
    printf(", \"tmpfs\": %s, \"o_direct\": %s, \"io_uring\": %s, "
           "\"nvme_engine_expected\": ", x->dir.tmpfs ? "true" : "false",
           x->dir.direct ? "true" : "false", x->dir.uring ? "true" : "false");
    json_string(stdout, x->engine);
    if (x->dir.why[0]) {
        printf(", \"reason\": ");
        json_string(stdout, x->dir.why);
    }
    printf("}, \"method\": \"medians over reps; GB/s = size / time; each "
           "baseline runs next to the move it is compared with, before it in "
           "even reps and after it in odd ones\", \"transfers\": [");
    for (int d = 0; d < X_COUNT; d++) {
        printf("%s\n  {\"direction\": \"%s\", \"call\": ", d ? "," : "",
               xfers[d].key);
        json_string(stdout, xfers[d].call);
        printf(", \"ump_gbs\": %.3f, \"baseline\": ", x->ump_gbs[d]);
        json_string(stdout, base_label(x, (enum xfer)d));
        printf(", \"baseline_gbs\": ");
        json_num(x->base_gbs[d], x->base_ok[d], 3);
        printf(", \"ratio\": ");
        json_num(x->ump_gbs[d] / x->base_gbs[d], x->base_ok[d], 3);
        printf(", \"target\": ");
        json_num(xfers[d].target, xfers[d].target > 0, 2);
        if (!x->base_ok[d]) {
            printf(", \"reason\": ");
            json_string(stdout, base_why(x, (enum xfer)d));
        }
        printf("}");
    }
    printf("\n], \"loop\": {\"device_capacity\": %zu, \"tensors\": %d, "
           "\"tensor_size\": %zu, \"rounds\": %d, \"prefetch_depth\": %d, "
           "\"wall_s\": %.4f, \"untimed_round_s\": %.4f, \"in_acquire_s\": "
           "%.4f, \"in_prefetch_s\": %.4f, \"spill_bytes\": %" PRIu64
           ", \"restore_bytes\": %" PRIu64
           ", \"evictions\": %" PRIu64 ", \"touch_gbs\": %.3f, "
           "\"touch_s\": %.4f, \"raw_d2h_gbs\": ",
           l->capacity, l->tensors, l->tensor, l->rounds, LOOP_PREFETCH,
           l->wall_s, l->first_s, l->acquire_s, l->prefetch_s, l->spill_bytes,
           l->restore_bytes,
           l->evictions, l->touch_gbs, l->touch_s);
    json_num(l->d2h_gbs, l->ideal_ok, 3);
    printf(", \"raw_h2d_gbs\": ");
    json_num(l->h2d_gbs, l->ideal_ok, 3);
    printf(", \"transfer_s\": ");
    json_num(l->transfer_s, l->ideal_ok, 4);
    printf(", \"ideal_s\": ");
    json_num(l->ideal_s, lok, 4);
    printf(", \"ratio\": ");
    json_num(l->wall_s / l->ideal_s, lok, 3);
    printf(", \"ideal_is_lower_bound\": %s, \"target\": %.2f}}\n",
           l->nvme_used ? "true" : "false", TARGET_LOOP);
}

static void print_header(const struct off *x)
{
    char sz[32];

    printf("umpool-bench offload (umpool %s): backend %s, pool config\n  "
           "\"%s\"\n", ump_version_string(), x->backend, x->config);
    printf("spill directory %s%s: O_DIRECT %s, io_uring %s; NVMe engine "
           "expected: %s\n", x->dir.path,
           x->dir.tmpfs ? " (tmpfs: memory, not a disk)" : "",
           x->dir.direct ? "works" : "refused",
           x->dir.uring ? "works" : "not usable", x->engine);
    if (x->dir.why[0])
        printf("  (%s; the library logs \"nvme: using the pread/pwrite "
               "thread engine\" at log_level info)\n", x->dir.why);
    if (x->dir.tmpdir_skipped)
        printf("  ($TMPDIR is tmpfs, memory rather than a disk: not "
               "used)\n");
    printf("\n(a) moves of one offloadable %s allocation on device 0, "
           "median of %d; GB/s = bytes / time\n",
           fmt_size(x->size, sz, sizeof(sz)), x->reps);
    printf("  NVMe->host: ump_prefetch(UMP_LOC_HOST), then ump_ptr_info "
           "polled every %ld us until no chunk is on NVMe\n",
           POLL_NS / 1000);
    if (!x->copy.ok)
        printf("  device<->host baseline: n/a (%s)\n", x->copy.why);
    else if (x->copy.cuda)
        printf("  device<->host baseline: cuMemcpyDtoH / cuMemcpyHtoD "
               "between device 0 and pinned memory\n  (cuMemAlloc, "
               "cuMemAllocHost)\n");
    else
        printf("  device<->host baseline: memcpy between two prefaulted "
               "buffers (what the sim backend's\n  copies do)\n");
    if (x->disk.kind == DISK_FIO)
        printf("  host<->NVMe baseline: %s --ioengine=io_uring --direct=1 "
               "--bs=1M --iodepth=32 in the spill directory\n", x->disk.fio);
    else if (x->disk.kind == DISK_URING)
        printf("  host<->NVMe baseline: fio is not in PATH; our io_uring "
               "loop on an O_DIRECT file in the spill\n  directory, 1 MiB "
               "blocks, queue depth 32\n");
    if (!x->disk.ok)
        printf("  host<->NVMe baseline: n/a (%s)\n", x->disk.why);
    printf("  device<->NVMe baseline: the slower leg of the two raw moves "
           "(a perfect pipeline)\n\n");
}

static void print_table(const struct off *x)
{
    const struct loop_res *l = &x->loop;
    char a[32], b[32];

    print_header(x);
    printf("%-12s | %-33s | %8s | %-10s %8s | %8s | %s\n", "direction",
           "umpool call", "ump GB/s", "baseline", "GB/s", "ump/base",
           "target");
    for (int d = 0; d < X_COUNT; d++) {
        bool ok = x->base_ok[d];
        double ratio = ok ? x->ump_gbs[d] / x->base_gbs[d] : 0;

        printf("%-12s | %-33s | %8.3f | %-10s", xfers[d].label,
               xfers[d].call, x->ump_gbs[d], base_label(x, (enum xfer)d));
        if (ok)
            printf(" %8.3f | %8.3f |", x->base_gbs[d], ratio);
        else
            printf(" %8s | %8s |", "n/a", "n/a");
        if (xfers[d].target > 0)
            printf(" >= %.2f%s\n", xfers[d].target,
                   !ok ? "" : ratio >= xfers[d].target ? " ok" : " below");
        else
            printf(" -\n");
    }
    printf("\n(b) oversubscribed loop: %d offloadable tensors of %s (%.1fx "
           "the device's %s), %d rounds\n  after an untimed one; in order: "
           "ump_prefetch of the next %d, ump_acquire, check,\n  "
           "ump_memset_async, ump_release\n",
           l->tensors, fmt_size(l->tensor, a, sizeof(a)),
           (double)l->tensor * l->tensors / (double)l->capacity,
           fmt_size(l->capacity, b, sizeof(b)), l->rounds, LOOP_PREFETCH);
    printf("  pool config \"%s\"\n", x->loop_config);
    printf("  wall time        %8.3f s  (in ump_acquire %.3f s, in ump_prefetch "
           "%.3f s; the untimed\n%32sround took %.3f s)\n", l->wall_s,
           l->acquire_s, l->prefetch_s, "", l->first_s);
    printf("  moved            %s down, %s up (spill_bytes, restore_bytes); "
           "%" PRIu64 " evictions\n",
           fmt_size(l->spill_bytes, a, sizeof(a)),
           fmt_size(l->restore_bytes, b, sizeof(b)), l->evictions);
    if (l->ideal_ok)
        printf("  at raw bandwidth %8.3f s  (%s of one tensor, medians of %d, "
               "half before\n%32sthe rounds, half after: device->host %.2f "
               "GB/s,\n%32shost->device %.2f GB/s)\n", l->transfer_s,
               x->copy.name, LOOP_BASE_REPS, "", l->d2h_gbs, "", l->h2d_gbs);
    else
        printf("  at raw bandwidth      n/a  (%s)\n", l->why);
    printf("  touches alone    %8.3f s  (ump_memset_async at %.2f GB/s on a "
           "resident tensor)\n", l->touch_s, l->touch_gbs);
    if (l->ideal_ok && l->ideal_s > 0) {
        double ratio = l->wall_s / l->ideal_s;

        printf("  ideal            %8.3f s  (the longer of the two%s)\n",
               l->ideal_s, l->nvme_used ? "; a lower bound: some data went "
               "to NVMe" : "");
        printf("  without overlap  %8.3f s  (transfers, then touches)\n",
               l->transfer_s + l->touch_s);
        printf("  wall / ideal     %8.3f    (target <= %.2f%s)\n", ratio,
               TARGET_LOOP, ratio <= TARGET_LOOP ? " ok" : " above");
    } else {
        printf("  wall / ideal          n/a\n");
    }
}

int bench_offload(const struct bench_offload_opts *o)
{
    struct off *x = calloc(1, sizeof(*x));
    char backend[16];
    int ret = 1;

    if (!x)
        return fail("calloc", -ENOMEM);
    x->o = o;
    x->disk.fd = -1;
    x->size = o->size ? o->size : DEFAULT_SIZE;
    x->reps = o->reps ? o->reps : DEFAULT_REPS;
    /* PCIe needs more than 256 MiB to reach its speed. */
    if (!o->size && o->config && conf_value(o->config, "backend", backend,
                                            sizeof(backend)) &&
        !strcmp(backend, "cuda"))
        x->size = CUDA_DEFAULT_SIZE;
    spill_dir_probe(&x->dir, o->dir);
    x->budget = o->budget ? o->budget : x->size / 2;
    if (make_configs(x))
        goto out;
    if (xfer_run(x) || loop_run(x))
        goto out;
    loop_ideal(x);
    if (o->json)
        print_json(x);
    else
        print_table(x);
    ret = 0;
out:
    copy_cleanup(&x->copy);
    disk_cleanup(&x->disk);
    free(x->loop_config);
    free(x->config);
    free(x);
    return ret;
}
