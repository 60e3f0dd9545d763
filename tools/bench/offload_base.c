/*
 * umpool-bench offload: the raw baselines its moves are compared with, and
 * the spill directory they share. device<->host: memcpy between two
 * prefaulted buffers on sim (the sim backend's copies are memcpy), paced
 * to the model's pinned cuMemcpy when the sim waits for the H200's costs
 * (sim_driver_costs:h200-timed), pinned cuMemcpyDtoH/HtoD on cuda (the
 * driver from cuda_loader.c). host<->NVMe:
 * fio (io_uring, O_DIRECT, 1 MiB blocks, queue depth 32) when it is in
 * PATH, else the same pattern through liburing on an O_DIRECT file in the
 * spill directory (this file holds the tools' one io_uring loop).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "bench.h"
#include "cuda_loader.h"
#include "offload.h"
#include "topo/drivercost.h"

#define TMPFS_MAGIC_NR 0x01021994 /* statfs f_type of tmpfs */

/* ---- the spill directory ------------------------------------------------ */

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

/* The library decides for itself what it can use; this is the same test,
 * made here. */
void spill_dir_probe(struct spill_dir *d, const char *dir)
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

#ifdef BENCH_CUDA
/* The driver (cuda_loader.c), device 0's primary context current here (the
 * one the pool uses), device memory and pinned host memory of c->size. */
static void cuda_copy_setup(struct copy_base *c)
{
    struct bench_cu *drv = &c->drv;
    CUresult r;

    if (bench_cu_load(drv, BENCH_CU_COPY, c->why, sizeof(c->why)))
        return;
    if ((r = drv->mem_alloc(&c->dptr, c->size)) != CUDA_SUCCESS) {
        snprintf(c->why, sizeof(c->why), "cuMemAlloc of %zu bytes: %s",
                 c->size, bench_cu_err(drv, r));
        return;
    }
    if ((r = drv->mem_alloc_host(&c->host, c->size)) != CUDA_SUCCESS) {
        snprintf(c->why, sizeof(c->why), "cuMemAllocHost of %zu bytes: %s",
                 c->size, bench_cu_err(drv, r));
        c->host = NULL;
        return;
    }
    memset(c->host, FILL, c->size);
    c->ok = true;
}
#endif

/* A synchronous pinned cuMemcpy of bytes on the H200 of the model: its
 * latency and time on the link, then the sync (what the sim's timed
 * copies on a stream cost, at the pinned rate). */
static uint64_t pinned_copy_ns(size_t bytes)
{
    const struct drvcost_misc *m = &drvcost_h200;

    return m->copy_lat_ns + m->copy_gap_ns +
           drvcost_bytes_ns(bytes, m->pinned_gbs) + m->sync_ns;
}

/* Returns at deadline (now_ns), sleeping until the last 50 us, then
 * spinning: a sleep overshoots by the timer slack. */
static void pace_until(uint64_t deadline)
{
    uint64_t now = now_ns();

    if (now + 50000 < deadline) {
        uint64_t wake = deadline - 50000;
        struct timespec ts = {(time_t)(wake / 1000000000ull),
                              (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
               EINTR)
            ;
    }
    while (now_ns() < deadline)
        ;
}

double copy_model_gbs(const struct copy_base *c)
{
    return c->pace ? (double)c->size / (double)(c->pace *
                                                pinned_copy_ns(c->size))
                   : 0;
}

/* size bytes of private memory, every page present; NULL when there is
 * none. */
static void *populated(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void copy_setup(struct copy_base *c, bool cuda, size_t size, unsigned pace)
{
    memset(c, 0, sizeof(*c));
    c->size = size;
    c->cuda = cuda;
    c->pace = cuda ? 0 : pace;
    if (cuda) {
        c->name = "cuMemcpy";
#ifdef BENCH_CUDA
        cuda_copy_setup(c);
#else
        snprintf(c->why, sizeof(c->why), "umpool-bench was built without "
                 "cuda.h");
#endif
        return;
    }
    c->name = c->pace ? "H200 copy" : "memcpy";
    /* Faulted in now, as the pool's chunks are backed before they move:
     * MAP_POPULATE does it for a fraction of what touching each page costs
     * on a virtual machine (a GiB: about 1.5 s against 4.5 s on the 2-core
     * one this was written on). */
    c->dev = populated(size);
    c->host = populated(size);
    if (!c->dev || !c->host) {
        snprintf(c->why, sizeof(c->why), "out of memory");
        return;
    }
    memset(c->dev, FILL, size);
    memset(c->host, ~FILL & 0xff, size);
    c->ok = true;
}

void copy_cleanup(struct copy_base *c)
{
#ifdef BENCH_CUDA
    if (c->drv.retained) {
        if (c->host)
            c->drv.mem_free_host(c->host);
        if (c->dptr)
            c->drv.mem_free(c->dptr);
        bench_cu_unload(&c->drv);
        return;
    }
#endif
    if (c->dev)
        munmap(c->dev, c->size);
    if (c->host)
        munmap(c->host, c->size);
}

void copy_run(struct copy_base *c, bool to_host, double *ns_p)
{
    uint64_t t0 = now_ns();

#ifdef BENCH_CUDA
    if (c->drv.retained) {
        CUresult r = to_host ? c->drv.dtoh(c->host, c->dptr, c->size)
                             : c->drv.htod(c->dptr, c->host, c->size);

        if (r != CUDA_SUCCESS) {
            snprintf(c->why, sizeof(c->why), "%s: %s",
                     to_host ? "cuMemcpyDtoH" : "cuMemcpyHtoD",
                     bench_cu_err(&c->drv, r));
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
    if (c->pace)
        pace_until(t0 + c->pace * pinned_copy_ns(c->size));
    *ns_p = (double)(now_ns() - t0);
}

/* ---- host<->NVMe baseline ----------------------------------------------- */

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

            /* A fresh destination takes each block in its own place. */
            void *buf = d->dest ? d->dest + next * IO_BLOCK : d->bufs[b];
            if (write)
                io_uring_prep_write(sqe, d->fd, buf, IO_BLOCK,
                                    next * IO_BLOCK);
            else
                io_uring_prep_read(sqe, d->fd, buf, IO_BLOCK,
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

int disk_durable(const char *path, size_t size, bool write, bool fresh,
                 double *ns_p)
{
#ifdef HAVE_LIBURING
    struct disk_base d;
    int rc = 0;
    memset(&d, 0, sizeof(d));
    if (fresh && !write) {
        d.dest = mmap(NULL, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (d.dest == MAP_FAILED)
            return -ENOMEM;
    }
    for (int i = 0; i < IO_DEPTH && !rc; i++) {
        if (posix_memalign(&d.bufs[i], IO_ALIGN, IO_BLOCK)) {
            d.bufs[i] = NULL;
            rc = -ENOMEM;
        } else {
            memset(d.bufs[i], FILL, IO_BLOCK);
        }
    }
    uint64_t t0 = now_ns();
    d.fd = rc ? -1
              : open(path, write ? O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT
                                 : O_RDONLY | O_DIRECT,
                     0600);
    if (!rc && d.fd < 0)
        rc = -errno;
    double ns;
    if (!rc)
        rc = uring_pass(&d, size, write, &ns);
    if (!rc && write && fsync(d.fd))
        rc = -errno;
    if (d.fd >= 0)
        close(d.fd);
    *ns_p = (double)(now_ns() - t0);
    d.fd = -1;
    if (d.dest)
        munmap(d.dest, size);
    disk_cleanup(&d);
    return rc;
#else
    (void)path, (void)size, (void)write, (void)fresh, (void)ns_p;
    return -ENOTSUP;
#endif
}

void disk_setup(struct disk_base *d, const struct spill_dir *dir,
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

void disk_cleanup(struct disk_base *d)
{
    if (d->kind == DISK_FIO)
        unlink(d->file);
    if (d->fd >= 0)
        close(d->fd);
    for (int i = 0; i < IO_DEPTH; i++)
        free(d->bufs[i]);
}

void disk_run(struct disk_base *d, size_t size, bool write,
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

const char *disk_name(const struct disk_base *d)
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

