#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#ifdef HAVE_LIBNUMA
#include <numa.h>
#include <numaif.h>
#endif

#include "util/crc32c.h"
#include "util/log.h"
#include "topo/topology.h"

#include "tier/nvme_store.h"


/* Opens a hidden file in path: O_TMPFILE, else a named file unlinked at once.
 * Returns the fd or a negative errno. */
static int nvme_open_hidden(const char *path, bool direct)
{
    int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
    int fd = open(path, O_TMPFILE | flags, 0600);

    if (fd >= 0)
        return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR)
        return -errno;

    size_t len = strlen(path) + sizeof("/umpool-nvme-XXXXXX");
    char *name = malloc(len);

    if (!name)
        return -ENOMEM;
    snprintf(name, len, "%s/umpool-nvme-XXXXXX", path);
    fd = mkostemp(name, flags & ~O_RDWR);
    if (fd < 0) {
        int err = -errno;

        free(name);
        return err;
    }
    unlink(name);
    free(name);
    return fd;
}

static size_t nvme_dio_align(int fd)
{
    size_t align = NVME_ALIGN_MIN;
#ifdef STATX_DIOALIGN
    struct statx stx;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN)) {
        align = nvme_max(align, stx.stx_dio_offset_align);
        align = nvme_max(align, stx.stx_dio_mem_align);
    }
#else
    (void)fd;
#endif
    return align;
}

/* Opens dir's file; *why is set when O_DIRECT was refused. */
static int nvme_dir_open(struct nvme_store *st, struct nvme_dir *dir,
                         const char *path, const char **why)
{
    dir->path = strdup(path);
    if (!dir->path)
        return -ENOMEM;
    dir->direct = true;
    dir->fd = nvme_open_hidden(path, true);
    if (dir->fd == -EINVAL) {
        dir->direct = false;
        dir->fd = nvme_open_hidden(path, false);
        *why = "o_direct refused";
    }
    if (dir->fd < 0) /* the caller logs it, once (offload's xfer_open) */
        return dir->fd;
    if (dir->direct)
        st->align = nvme_max(st->align, nvme_dio_align(dir->fd));
    return 0;
}


#ifdef HAVE_LIBURING
/* Sets up one ring per directory and registers the arena; false when
 * io_uring is unavailable (then reason, of len bytes, says why). */
static bool nvme_uring_setup(struct nvme_store *st, char *reason, size_t len)
{
    for (int d = 0; d < st->ndirs; d++) {
        int ret = io_uring_queue_init(st->qd, &st->dirs[d].ring, 0);

        if (ret < 0) {
            snprintf(reason, len, "io_uring unavailable (%s)", strerror(-ret));
            return false;
        }
        st->dirs[d].ring_ok = true;
    }
    if (!st->arena)
        return true;

    struct iovec *iov = calloc(st->arena_n, sizeof(*iov));

    if (!iov)
        return true;
    for (unsigned i = 0; i < st->arena_n; i++) {
        iov[i].iov_base = st->arena + (size_t)i * st->slot_size;
        iov[i].iov_len = st->slot_size;
    }
    st->fixed = true;
    for (int d = 0; d < st->ndirs && st->fixed; d++) {
        int ret = io_uring_register_buffers(&st->dirs[d].ring, iov,
                                            st->arena_n);
        if (ret < 0) {
            ump_log_debug("nvme: buffers not registered: %s", strerror(-ret));
            for (int e = 0; e < d; e++)
                io_uring_unregister_buffers(&st->dirs[e].ring);
            st->fixed = false;
        }
    }
    free(iov);
    return true;
}
#endif

/* The bounce buffers go on the NUMA node of the memory they are copied
 * from and to, before their pages exist (registering them with io_uring
 * touches and pins them). Best effort: a machine without NUMA or libnuma
 * only loses some bandwidth. */
static void nvme_arena_bind(void *p, size_t len, int node)
{
#ifdef HAVE_LIBNUMA
    if (node < 0 || numa_available() < 0 || node > numa_max_node())
        return;
    unsigned long mask[(UMP_MAX_NUMA + 63) / 64] = {0};
    if (node >= UMP_MAX_NUMA)
        return;
    mask[node / 64] = 1ul << (node % 64);
    if (mbind(p, len, MPOL_PREFERRED, mask, UMP_MAX_NUMA + 1, 0) != 0)
        ump_log_debug("nvme: bounce buffers not bound to node %d: %s", node,
                      strerror(errno));
#else
    (void)p;
    (void)len;
    (void)node;
#endif
}

/* A store with ndirs directories not opened yet (fd -1), to be filled by
 * the caller, then started by nvme_store_start; NULL without memory. */
static struct nvme_store *nvme_store_new(const struct nvme_config *cfg,
                                         int ndirs)
{
    struct nvme_store *st = calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    st->slot_size = cfg->slot_size;
    st->align = NVME_ALIGN_MIN;
    st->qd = cfg->queue_depth ? cfg->queue_depth : NVME_QD_DEFAULT;
    if (st->qd > NVME_QD_MAX)
        st->qd = NVME_QD_MAX;
    st->dirs = calloc((size_t)ndirs, sizeof(*st->dirs));
    if (!st->dirs) {
        free(st);
        return NULL;
    }
    for (int d = 0; d < ndirs; d++)
        st->dirs[d].fd = -1;
    return st;
}

/* Once the files are open: the arena of bounce buffers, then the engine.
 * *why is set (or kept, when the caller already knows that the thread
 * engine is needed) when it is the thread engine; reason holds its text. */
static int nvme_store_start(struct nvme_store *st,
                            const struct nvme_config *cfg, const char **why,
                            char *reason, size_t len)
{
    st->arena_n = st->qd;
    if ((size_t)st->arena_n * st->slot_size > NVME_ARENA_MAX)
        st->arena_n = (unsigned)(NVME_ARENA_MAX / st->slot_size);
    if (st->arena_n) {
        st->arena_len = (size_t)st->arena_n * st->slot_size;
        st->arena = mmap(NULL, st->arena_len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (st->arena == MAP_FAILED)
            st->arena = NULL;
        st->arena_busy = calloc(st->arena_n, sizeof(*st->arena_busy));
        if (!st->arena || !st->arena_busy)
            return -ENOMEM;   /* nvme_close frees what there is */
        nvme_arena_bind(st->arena, st->arena_len, cfg->numa_node);
    }

    if (cfg->force_threads)
        *why = *why ? *why : "threads forced";
#ifdef HAVE_LIBURING
    else if (!*why) {
        st->uring = nvme_uring_setup(st, reason, len);
        if (!st->uring)
            *why = reason;
    }
#else
    else if (!*why)
        *why = "built without liburing";
    (void)reason;
    (void)len;
#endif
    return 0;
}

int nvme_open(const struct nvme_config *cfg, struct nvme_store **st_p)
{
    const char *why = NULL;
    char reason[96];
    int ret;

    if (!cfg || !st_p || !cfg->dirs || cfg->ndirs <= 0 ||
        cfg->slot_size == 0 || cfg->slot_size % NVME_MIB)
        return -EINVAL;
    for (int d = 0; d < cfg->ndirs; d++)
        if (!cfg->dirs[d])
            return -EINVAL;

    struct nvme_store *st = nvme_store_new(cfg, cfg->ndirs);

    if (!st)
        return -ENOMEM;
    st->limited = cfg->limit != 0;
    st->limit_slots = cfg->limit / cfg->slot_size;
    for (int d = 0; d < cfg->ndirs; d++) {
        st->ndirs = d + 1;
        ret = nvme_dir_open(st, &st->dirs[d], cfg->dirs[d], &why);
        if (ret < 0)
            goto err;
    }
    ret = nvme_store_start(st, cfg, &why, reason, sizeof(reason));
    if (ret < 0)
        goto err;
    if (!st->uring)
        ump_log_info("nvme: using the pread/pwrite thread engine: %s", why);
    *st_p = st;
    return 0;

err:
    nvme_close(st);
    return ret;
}

/* Opens the named file of a file store: made (O_EXCL) or read-only, then
 * switched to O_DIRECT where the file system takes it (setting it after
 * open, for open(O_CREAT | O_DIRECT) may make the file before refusing
 * O_DIRECT); *made_p tells whether the file was made here. */
static int nvme_file_open(struct nvme_store *st, struct nvme_dir *dir,
                          const char *path, bool create, bool *made_p)
{
    int flags = O_CLOEXEC | (create ? O_RDWR | O_CREAT | O_EXCL : O_RDONLY);
    int fl;

    dir->path = strdup(path);
    if (!dir->path)
        return -ENOMEM;
    dir->fd = open(path, flags, 0600);
    if (dir->fd < 0)
        return -errno;
    *made_p = create;
    fl = fcntl(dir->fd, F_GETFL);
    dir->direct = fl >= 0 && fcntl(dir->fd, F_SETFL, fl | O_DIRECT) == 0;
    if (!dir->direct)
        return 0;
    st->align = nvme_max(st->align, nvme_dio_align(dir->fd));
    if (st->base % st->align == 0)
        return 0;
    /* slot space not aligned for this file system's O_DIRECT: buffered */
    if (fcntl(dir->fd, F_SETFL, fl) != 0)
        return -errno;
    dir->direct = false;
    return 0;
}

int nvme_open_file(const struct nvme_config *cfg, const char *path,
                   bool create, uint64_t base, uint64_t nslots,
                   struct nvme_store **st_p)
{
    const char *why = NULL;
    char reason[96];
    bool made = false;
    int ret;

    if (!cfg || !path || !st_p || cfg->slot_size == 0 ||
        cfg->slot_size % NVME_MIB || base % NVME_ALIGN_MIN)
        return -EINVAL;
    if (create)
        nslots = 0;
    if (base > (uint64_t)INT64_MAX ||
        nslots > ((uint64_t)INT64_MAX - base) / cfg->slot_size ||
        nslots > SIZE_MAX / sizeof(struct nvme_slot))
        return -EINVAL;

    struct nvme_store *st = nvme_store_new(cfg, 1);

    if (!st)
        return -ENOMEM;
    st->base = base;
    st->rdonly = !create;
    st->ndirs = 1;
    ret = nvme_file_open(st, &st->dirs[0], path, create, &made);
    if (ret < 0)
        goto err;
    if (nslots) {
        st->slots = calloc(nslots, sizeof(*st->slots));
        if (!st->slots) {
            ret = -ENOMEM;
            goto err;
        }
        for (uint64_t s = 0; s < nslots; s++)
            st->slots[s].used = true;
        st->cap = nslots;
        st->nused = nslots;
        st->dirs[0].file_slots = nslots;   /* never grown: read-only */
    }
    ret = nvme_store_start(st, cfg, &why, reason, sizeof(reason));
    if (ret < 0)
        goto err;
    *st_p = st;
    return 0;

err:
    if (made)   /* no store: the file made for it goes too */
        unlink(path);
    nvme_close(st);
    return ret;
}

void nvme_close(struct nvme_store *st)
{
    if (!st)
        return;
    for (int d = 0; d < st->ndirs; d++) {
        struct nvme_dir *dir = &st->dirs[d];

#ifdef HAVE_LIBURING
        if (dir->ring_ok)
            io_uring_queue_exit(&dir->ring);
#endif
        if (dir->fd >= 0)
            close(dir->fd);
        free(dir->path);
    }
    if (st->arena)
        munmap(st->arena, st->arena_len);
    free(st->arena_busy);
    free(st->dirs);
    free(st->slots);
    free(st);
}

/* Makes fd at least len bytes long (never shorter: a named file may hold
 * more than the store wrote, such as a checkpoint's header). */
static bool nvme_file_extend(int fd, off_t len)
{
    struct stat sb;

    if (fstat(fd, &sb) == 0 && sb.st_size >= len)
        return true;
    return ftruncate(fd, len) == 0;
}

/* Makes the file of dir cover need slots, growing in steps; only the new
 * part is allocated. */
static int nvme_dir_grow(struct nvme_store *st, struct nvme_dir *dir,
                         uint64_t need)
{
    if (need <= dir->file_slots)
        return 0;

    uint64_t have = dir->file_slots;
    uint64_t step = nvme_max(NVME_GROW_SLOTS, have);
    uint64_t step_max = nvme_max(1, NVME_GROW_MAX_BYTES / st->slot_size);
    uint64_t target = nvme_max(need, have + (step < step_max ? step
                                                             : step_max));
    off_t from = nvme_file_off(st, have);

    /* no directory ever holds more slots than the whole limit */
    if (st->limited && target > st->limit_slots)
        target = nvme_max(need, st->limit_slots);
    if (fallocate(dir->fd, 0, from, nvme_file_off(st, target) - from) < 0) {
        int err = errno;

        if (err == ENOSPC && target > need &&
            fallocate(dir->fd, 0, from, nvme_file_off(st, need) - from) == 0) {
            target = need;
        } else if (err == EOPNOTSUPP &&
                   nvme_file_extend(dir->fd, nvme_file_off(st, target))) {
            /* a sparse file is the best this filesystem offers */
        } else {
            ump_log_warn("nvme: cannot grow the spill file in %s: %s",
                         dir->path, strerror(err));
            return err == ENOSPC ? -ENOSPC : -err;
        }
    }
    dir->file_slots = target;
    return 0;
}

int nvme_slot_alloc(struct nvme_store *st, uint64_t *slot_p)
{
    if (!st || !slot_p)
        return -EINVAL;
    if (st->rdonly)
        return -EBADF;
    if (st->limited && st->nused >= st->limit_slots)
        return -ENOSPC;

    /* a linear scan: stores hold thousands of slots, not millions */
    uint64_t n = (uint64_t)st->ndirs;
    uint64_t d = (uint64_t)st->rr;
    uint64_t s = d;

    while (s < st->cap && st->slots[s].used)
        s += n;
    if (s >= st->cap) {
        uint64_t cap = nvme_max(st->cap * 2, (s + n) / n * n);
        struct nvme_slot *slots = realloc(st->slots, cap * sizeof(*slots));

        if (!slots)
            return -ENOMEM;
        memset(slots + st->cap, 0, (cap - st->cap) * sizeof(*slots));
        st->slots = slots;
        st->cap = cap;
    }

    int ret = nvme_dir_grow(st, &st->dirs[d], s / n + 1);

    if (ret < 0)
        return ret;
    st->slots[s] = (struct nvme_slot){ .used = true };
    st->nused++;
    st->rr = (int)((d + 1) % n);
    *slot_p = s;
    return 0;
}

void nvme_slot_free(struct nvme_store *st, uint64_t slot)
{
    if (!st || slot >= st->cap || !st->slots[slot].used)
        return;
    st->slots[slot] = (struct nvme_slot){ .used = false };
    st->nused--;
}

uint32_t nvme_slot_crc(const struct nvme_store *st, uint64_t slot)
{
    if (!st || slot >= st->cap || !st->slots[slot].valid)
        return 0;
    return st->slots[slot].crc;
}

void nvme_slot_expect(struct nvme_store *st, uint64_t slot, uint32_t crc)
{
    if (!st || slot >= st->cap || !st->slots[slot].used)
        return;
    st->slots[slot].crc = crc;
    st->slots[slot].valid = true;
}

void *nvme_buffer_alloc(struct nvme_store *st, size_t size)
{
    if (!st || size == 0)
        return NULL;
    if (size <= st->slot_size) {
        for (unsigned i = 0; i < st->arena_n; i++) {
            if (!st->arena_busy[i]) {
                st->arena_busy[i] = true;
                return st->arena + (size_t)i * st->slot_size;
            }
        }
    }

    void *p;
    size_t len = (size + st->align - 1) / st->align * st->align;

    if (posix_memalign(&p, st->align, len) != 0)
        return NULL;
    return p;
}

void nvme_buffer_free(struct nvme_store *st, void *p)
{
    unsigned idx;

    if (!st || !p)
        return;
    if (nvme_in_arena(st, p, &idx))
        st->arena_busy[idx] = false;
    else
        free(p);
}

void *nvme_arena(const struct nvme_store *st, size_t *len_p)
{
    *len_p = st && st->arena ? st->arena_len : 0;
    return *len_p ? st->arena : NULL;
}

const char *nvme_engine(const struct nvme_store *st)
{
    return st && st->uring ? "io_uring" : "threads";
}
