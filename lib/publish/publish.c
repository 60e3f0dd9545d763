/*
 * Each pool publishes its statistics in /dev/shm for umpool-inspect (see
 * publish.h and snapshot.h). The segment is created under a hidden name,
 * filled, then linked under its real name, so a reader never sees one
 * half made; it is unlinked at ump_pool_destroy, and at exit for pools
 * never destroyed, as long as the name still leads to our file. Segments
 * of processes that died are left for `umpool-inspect list --clean`,
 * which recognises them by their pid (and pid namespace).
 *
 * The writer holds the segment's descriptor and writes it with pwrite():
 * it never maps it but for the kernel's use as a futex, and never reads
 * from it but the request word, so that the file is just bytes others may
 * spoil, not memory of ours.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "front/registry.h"
#include "ipc/share.h"
#include "publish/publish.h"

/* The segment's states are the statistics' own. */
_Static_assert((int)SNAP_USED == STATS_USED &&
                   (int)SNAP_CACHED == STATS_CACHED &&
                   (int)SNAP_FREE == STATS_FREE &&
                   (int)SNAP_HOST == STATS_HOST &&
                   (int)SNAP_NVME == STATS_NVME &&
                   (int)SNAP_NSTATES == STATS_NSTATES,
               "snapshot states and statistics states differ");

#define MSEC 1000000ull
#define MIN_PERIOD (100 * MSEC)  /* refreshes at most this often */
#define IDLE_PERIOD (1000 * MSEC) /* ... and this often when nobody reads */
#define WATCH_TIME (5000 * MSEC)  /* a reader's request counts this long */
#define TICK (100 * MSEC)         /* the thread wakes at least this often */
#define FINE_MIN 64               /* first size of a device's fine map */
#define WALK_TRIES 3              /* walks of one refresh, growing the maps */

/* A device's fine map while a refresh builds it: at most cap runs, need
 * says how many the walk had (more than cap: it merged the rest). */
struct fine_map {
    struct snap_run *runs;
    size_t n, cap, need;
    uint64_t state_g[SNAP_NSTATES]; /* granules by state, exact */
};

struct publisher {
    ump_pool_t *pool;
    uint64_t pool_id;
    pid_t pid;             /* the process that created the segment */
    char path[128];        /* SNAP_DIR/umpool-... */
    int fd;                /* the segment, written with pwrite only */
    dev_t dev;             /* its identity: we unlink no other file */
    ino_t ino;
    /* Its first page, for the request futex: the kernel reads it, we
     * never do (a shrunk file would raise SIGBUS here, not there). */
    void *wake;
    size_t wake_len;
    /* The layout, fixed at creation: the segment is never read for it. */
    uint32_t ndev, max_allocs, map_cap;
    size_t size;
    uint64_t seq;          /* the seqlock's count, ours */
    uint64_t generation;
    bool broken;           /* the file changed under us: publishing stopped */
    char *body;            /* the next refresh, built beside the segment */
    struct fine_map *fine; /* per device */
    ump_alloc_info_t top[SNAP_ALLOCS];
    pthread_t thread;
    _Atomic bool stop;
    _Atomic uint32_t quit; /* a private futex, 1 once stop is set */
};

/* A publisher is found through its pool (pool->observer_state), and pools through the
 * front end's registry: one list of live pools and one set of fork
 * handlers for the whole library. */
static pthread_once_t pubs_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Unlinks the segment's name if it still names our file: after a crash
 * and a pid reused, or a --clean, it may be another process's. */
static void unlink_own(const struct publisher *pub)
{
    struct stat st;
    if (!lstat(pub->path, &st) && st.st_dev == pub->dev &&
        st.st_ino == pub->ino)
        unlink(pub->path);
}

static void unlink_pool_segment(ump_pool_t *pool, void *arg)
{
    (void)arg;
    struct publisher *p = pool->observer_state;
    if (p && p->pid == getpid())
        unlink_own(p);
}

/* Pools a program never destroyed: their names go at exit. The registry is
 * only tried: exit() may run while another thread holds its lock. */
static void publish_atexit(void)
{
    registry_try_for_each(unlink_pool_segment, NULL);
}

static void publish_global_init(void) { atexit(publish_atexit); }

/* ---- one refresh -------------------------------------------------------- */

/* Pool lock held: allocates nothing. A map that is full merges the piece
 * into its last run (need tells the refresh to grow it and walk again). */
static void fine_add(struct fine_map *f, const struct stats_piece *p)
{
    if (p->state < SNAP_NSTATES)
        f->state_g[p->state] += p->n;
    if (f->n && f->runs[f->n - 1].state == p->state) {
        f->runs[f->n - 1].n += p->n;
        return;
    }
    f->need++;
    if (f->n < f->cap)
        f->runs[f->n++] = (struct snap_run){p->state, p->n};
    else
        f->runs[f->n - 1].n += p->n;
}

/* What one walk of the pool builds: the fine maps and the largest runs. */
struct walk {
    struct publisher *pub;
    struct stats_top top;
};

static void walk_piece(void *arg, const struct stats_piece *p)
{
    struct walk *w = arg;
    stats_top_add(&w->top, p);
    if (p->device >= 0 && (uint32_t)p->device < w->pub->ndev)
        fine_add(&w->pub->fine[p->device], p);
}

/* Grows the fine maps that were too small for the last walk; false when
 * none was (or none could be grown: that picture blurs, its totals stay
 * right). */
static bool fine_grow(struct publisher *pub)
{
    bool grown = false;
    for (uint32_t d = 0; d < pub->ndev; d++) {
        struct fine_map *f = &pub->fine[d];
        if (f->need <= f->cap)
            continue;
        size_t cap = f->need + f->need / 4;
        struct snap_run *r = realloc(f->runs, cap * sizeof(*r));
        if (!r)
            continue;
        f->runs = r;
        f->cap = cap;
        grown = true;
    }
    return grown;
}

/* The tiers' figures. Takes the pool lock itself. */
static void read_tiers(ump_pool_t *pool, struct snap_data *data)
{
    static const int tiers[SNAP_NTIERS] = {UMP_TIER_HOST, UMP_TIER_NVME};
    for (int t = 0; t < SNAP_NTIERS; t++) {
        ump_tier_stats_t ts;
        if (ump_tier_stats(pool, tiers[t], &ts))
            continue;
        bool on = tiers[t] == UMP_TIER_HOST ? ts.capacity > 0
                                            : pool->cfg.nvme_dir[0] != '\0';
        data->tier[t] = (struct snap_tier){ts.capacity, ts.used_bytes,
                                           ts.reserve_bytes, ts.peak_bytes,
                                           ts.chunks, on, 0};
    }
}

static void fill_device(ump_pool_t *pool, int d, struct snap_device *sd)
{
    ump_stats_t st;
    stats_device(pool, d, &st);
    const struct topo_device *td = &pool->topo.dev[d];
    snprintf(sd->model, sizeof(sd->model), "%s", td->model);
    snprintf(sd->pci, sizeof(sd->pci), "%s", td->pci);
    sd->numa = td->numa;
    sd->capacity = st.capacity;
    sd->live_bytes = st.live_bytes;
    sd->mapped_bytes = st.mapped_bytes;
    sd->cached_bytes = st.cached_bytes;
    sd->peak_bytes = st.peak_bytes;
    sd->live_count = st.live_count;
    sd->alloc_count = st.alloc_count;
    sd->free_count = st.free_count;
    sd->chunks_created = st.chunks_created;
    sd->chunks_released = st.chunks_released;
    sd->host_bytes = st.host_bytes;
    sd->nvme_bytes = st.nvme_bytes;
    sd->spill_count = st.spill_count;
    sd->spill_bytes = st.spill_bytes;
    sd->restore_count = st.restore_count;
    sd->restore_bytes = st.restore_bytes;
    sd->evictions = st.evictions;
    sd->largest_free = st.largest_free;
    sd->fragmentation = st.fragmentation;
    sd->reserved_bytes = st.reserved_bytes;
    sd->peak_reserved_bytes = st.peak_reserved_bytes;
    sd->driver_ns = st.driver_ns;
    sd->failed = st.failed_devices > 0;
    sd->lost_count = st.lost_count;
    sd->lost_bytes = st.lost_bytes;
}

/* Stops publishing for good (the thread goes on ticking the pool's clock)
 * and removes the name if it is still ours. Publisher thread, or before
 * it starts. */
static void give_up(struct publisher *pub, const char *why)
{
    pub->broken = true;
    ump_log_warn("statistics of pool %" PRIu64 " no longer published: %s %s",
                 pub->pool_id, pub->path, why);
    unlink_own(pub);
}

/* Whether the segment is still the file we made: anyone of the user may
 * shrink or remove it. A shrink that comes after this check only makes
 * the next pwrite grow it back. */
static bool segment_intact(struct publisher *pub)
{
    struct stat st;
    char why[96];
    if (fstat(pub->fd, &st))
        snprintf(why, sizeof(why), "cannot be checked: %s", strerror(errno));
    else if (st.st_nlink == 0)
        snprintf(why, sizeof(why), "was removed by another process");
    else if ((uint64_t)st.st_size != pub->size)
        snprintf(why, sizeof(why), "was resized to %lld bytes by another "
                 "process", (long long)st.st_size);
    else
        return true;
    give_up(pub, why);
    return false;
}

/* The locked part of a refresh: the devices' figures and one walk for
 * the fine maps and the largest runs. Returns how many runs top holds. */
static size_t gather(struct publisher *pub, struct snap_data *data,
                     struct snap_device *dev)
{
    ump_pool_t *pool = pub->pool;
    struct walk w = {pub, {0}};
    for (uint32_t d = 0; d < pub->ndev; d++) {
        struct fine_map *f = &pub->fine[d];
        f->n = f->need = 0;
        memset(f->state_g, 0, sizeof(f->state_g));
    }
    pthread_mutex_lock(&pool->lock);
    size_t in_blocks = 0;
    for (uint32_t d = 0; d < pub->ndev; d++) {
        fill_device(pool, (int)d, &dev[d]);
        if (dev[d].largest_free > data->largest_free)
            data->largest_free = dev[d].largest_free;
        in_blocks += pool->dev[d].cached;
    }
    ump_stats_t all;
    stats_pool_wide(pool, &all);
    data->peak_bytes = all.peak_bytes;
    data->peak_reserved_bytes = all.peak_reserved_bytes;
    data->driver_ns = all.driver_ns;
    data->fragmentation =
        in_blocks ? 1.0 - (double)data->largest_free / (double)in_blocks : 0.0;
    stats_top_init(&w.top, pool, UMP_DEVICE_ALL, pub->top, pub->max_allocs);
    stats_walk(pool, walk_piece, &w);
    pthread_mutex_unlock(&pool->lock);
    return stats_top_end(&w.top);
}

_Static_assert(SNAP_NCOLL == TRAFFIC_NCOLL,
               "the snapshot's collectives and the pool's differ");

/* The public location of the link table's location i. */
static int traffic_loc(uint32_t ndev, uint32_t i)
{
    static const int extra[SNAP_LOC_EXTRA] = {UMP_LOC_HOST, UMP_LOC_NVME,
                                              UMP_LOC_NET};
    return i < ndev ? (int)i : extra[i - ndev];
}

/* The links' and the collectives' counters (no lock: they are atomics). */
static void fill_traffic(ump_pool_t *pool, uint32_t ndev,
                         struct snap_data *data, struct snap_link *link)
{
    uint32_t n = snap_nloc(ndev);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            ump_link_stats_t l;
            if (i == j ||
                ump_link_stats(pool, traffic_loc(ndev, i),
                               traffic_loc(ndev, j), &l))
                continue;
            link[i * n + j] = (struct snap_link){l.tier_bytes, l.coll_bytes,
                                                 l.bandwidth_gbs};
        }
    for (int c = 0; c < SNAP_NCOLL; c++) {
        ump_coll_stats_t s;
        if (!ump_coll_stats(pool, c, &s))
            data->coll[c] = (struct snap_coll){s.calls, s.bytes, s.timed_calls,
                                               s.timed_bus_bytes, s.timed_ns};
    }
}

_Static_assert(SNAP_SHARE_PROCS >= SHARE_SLOTS,
               "the snapshot has fewer rows than a shared pool's slots");

/* A shared pool's processes, from its ledger (lib/ipc). */
static void fill_share(ump_pool_t *pool, struct snap_data *data)
{
    struct share_proc procs[SHARE_SLOTS];
    int self;
    int n = share_processes(pool, data->share_name, sizeof(data->share_name),
                            procs, SHARE_SLOTS, &self);
    for (int i = 0; i < n; i++)
        data->share_proc[i] = (struct snap_share_proc){
            procs[i].pid, procs[i].slot, procs[i].bytes};
    data->share_nproc = (uint32_t)n;
    data->share_self = self;
}

/* Builds a snapshot and publishes it. Pool lock not held: taken here
 * while the figures are copied, not while the picture is drawn. Writes
 * only within the layout fixed at creation. */
static void refresh(struct publisher *pub)
{
    if (pub->broken || !segment_intact(pub))
        return;
    ump_pool_t *pool = pub->pool;
    const size_t hs = sizeof(struct snap_header);
    struct snap_data *data = (struct snap_data *)pub->body;
    struct snap_device *dev = (struct snap_device *)(pub->body +
                                                     snap_off_dev() - hs);
    struct snap_alloc *alloc =
        (struct snap_alloc *)(pub->body + snap_off_alloc(pub->ndev) - hs);
    struct snap_map *map = (struct snap_map *)(
        pub->body + snap_off_map(pub->ndev, pub->max_allocs) - hs);
    struct snap_link *link = (struct snap_link *)(
        pub->body + snap_off_link(pub->ndev, pub->max_allocs, pub->map_cap) -
        hs);
    size_t k;
    for (int tries = 1;; tries++) {
        memset(pub->body, 0, pub->size - hs);
        read_tiers(pool, data);
        k = gather(pub, data, dev);
        if (tries == WALK_TRIES || !fine_grow(pub))
            break;
    }

    for (uint32_t d = 0; d < pub->ndev; d++) {
        const struct fine_map *f = &pub->fine[d];
        uint64_t per;
        dev[d].map_count = snap_map_encode(f->runs, f->n, pub->map_cap,
                                           map + (size_t)d * pub->map_cap,
                                           &per);
        dev[d].map_unit = per << pool->chunk_shift;
        for (unsigned st = 0; st < SNAP_NSTATES; st++)
            dev[d].state_bytes[st] = f->state_g[st] << pool->chunk_shift;
    }
    for (size_t i = 0; i < k; i++)
        alloc[i] = (struct snap_alloc){
            .addr = (uintptr_t)pub->top[i].ptr,
            .size = pub->top[i].size,
            .device = pub->top[i].device,
            .ndevices = pub->top[i].ndevices,
            .tier = pub->top[i].tier,
            .flags = pub->top[i].flags,
            .age_s = pub->top[i].age_s,
        };
    data->nalloc = (uint32_t)k;
    fill_traffic(pool, pub->ndev, data, link);
    fill_share(pool, data);
    data->generation = ++pub->generation;
    data->updated_ns = now_ns(CLOCK_REALTIME);
    data->chunk_size = pool->chunk_size;
    data->va_size = pool->vas.size;
    int rc = snap_write(pub->fd, &pub->seq, pub->body, pub->size - hs);
    if (rc) {
        char why[96];
        snprintf(why, sizeof(why), "cannot be written: %s", strerror(-rc));
        give_up(pub, why);
    }
}

/* ---- the thread --------------------------------------------------------- */

static void futex_wait_private(_Atomic uint32_t *word, uint32_t val,
                               uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull),
                          (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, &ts, NULL,
            0);
}

static uint32_t *request_word(const struct publisher *pub)
{
    return (uint32_t *)((char *)pub->wake +
                        offsetof(struct snap_header, request));
}

/* The request word, read from the file (0 when it cannot be). */
static uint32_t read_request(const struct publisher *pub)
{
    uint32_t r = 0;
    if (pread(pub->fd, &r, sizeof(r), offsetof(struct snap_header, request)) !=
        (ssize_t)sizeof(r))
        return 0;
    return r;
}

/* Sleeps until the request word is no longer seen, a wake, a stop, or ns
 * nanoseconds. The futex is the segment's (readers wake it through their
 * own mappings); the kernel reads it and fails with EFAULT, where we would
 * fault, when the file has been shrunk: then, and once publishing has
 * stopped, the thread sleeps on its private word. */
static void wait_request(struct publisher *pub, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull),
                          (long)(ns % 1000000000ull)};
    if (!pub->broken &&
        (syscall(SYS_futex, request_word(pub), FUTEX_WAIT, seen, &ts, NULL,
                 0) == 0 ||
         errno != EFAULT))
        return;
    futex_wait_private(&pub->quit, 0, ns);
}

static void *publisher_main(void *arg)
{
    struct publisher *pub = arg;
    uint32_t seen = read_request(pub);
    uint64_t last = now_ns(CLOCK_MONOTONIC), watched_until = 0;
    bool asked = false;
    while (!atomic_load(&pub->stop)) {
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        uint64_t period = asked || now < watched_until ? MIN_PERIOD
                                                       : IDLE_PERIOD;
        if (!pub->broken && now - last >= period) {
            refresh(pub);
            last = now_ns(CLOCK_MONOTONIC);
            asked = false;
            continue;
        }
        uint64_t wait = last + period - now;
        wait_request(pub, seen, pub->broken || wait > TICK ? TICK : wait);
        pool_clock_tick(pub->pool);
        uint32_t r = pub->broken ? seen : read_request(pub);
        if (r != seen) {
            seen = r;
            asked = true;
            watched_until = now_ns(CLOCK_MONOTONIC) + WATCH_TIME;
        }
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------ */

static void pub_free(struct publisher *pub)
{
    if (pub->fine)
        for (uint32_t d = 0; d < pub->ndev; d++)
            free(pub->fine[d].runs);
    free(pub->fine);
    free(pub->body);
    if (pub->wake)
        munmap(pub->wake, pub->wake_len);
    if (pub->fd >= 0)
        close(pub->fd);
    free(pub);
}

/* The header, written once at creation. */
static int write_header(struct publisher *pub, const char *tmp)
{
    ump_pool_t *pool = pub->pool;
    struct snap_header h;
    memset(&h, 0, sizeof(h));
    snap_header_init(&h, pub->ndev, pub->max_allocs, pub->map_cap);
    h.uid = (uint32_t)geteuid(); /* the file's owner, as readers check */
    h.pid = (int32_t)pub->pid;
    if (snap_proc_start(h.pid, &h.pid_start))
        h.pid_start = 0;
    if (snap_pid_ns(&h.pid_ns))
        h.pid_ns = 0;
    h.pool_id = pool->id;
    h.created_ns = now_ns(CLOCK_REALTIME);
    snprintf(h.program, sizeof(h.program), "%s",
             program_invocation_short_name);
    snprintf(h.backend, sizeof(h.backend), "%s", pool->be->name);
    snprintf(h.topology, sizeof(h.topology), "%s", pool->topo.name);
    ssize_t n = pwrite(pub->fd, &h, sizeof(h), 0);
    if (n == (ssize_t)sizeof(h))
        return 0;
    int rc = n < 0 ? -errno : -EIO;
    ump_log_warn("statistics not published: cannot write %s: %s", tmp,
                 strerror(-rc));
    return rc;
}

/* Creates the segment under a hidden name, sized, its header written and
 * its first page mapped for the futex. */
static int create_segment(struct publisher *pub, char *tmp, size_t tmplen)
{
    char name[96];
    struct snap_name sn = {(uint32_t)geteuid(), 0, (int32_t)pub->pid,
                           pub->pool_id};
    if (snap_pid_ns(&sn.pid_ns))
        sn.pid_ns = 0;
    int rc = snap_name(name, sizeof(name), &sn);
    if (rc)
        return rc;
    snprintf(pub->path, sizeof(pub->path), SNAP_DIR "/%s", name);
    snprintf(tmp, tmplen, SNAP_DIR "/.%s", name);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd < 0 && errno == EEXIST) { /* our own pid's: a crash, then exec */
        unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    }
    if (fd < 0) {
        rc = -errno;
        ump_log_warn("statistics not published: cannot create %s: %s", tmp,
                     strerror(-rc));
        return rc;
    }
    pub->fd = fd;
    struct stat st;
    if (fstat(fd, &st) || ftruncate(fd, (off_t)pub->size)) {
        rc = -errno;
        ump_log_warn("statistics not published: cannot size %s: %s", tmp,
                     strerror(-rc));
        goto fail;
    }
    pub->dev = st.st_dev;
    pub->ino = st.st_ino;
    rc = write_header(pub, tmp);
    if (rc)
        goto fail;
    pub->wake_len = (size_t)sysconf(_SC_PAGESIZE);
    void *m = mmap(NULL, pub->wake_len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        ump_log_warn("statistics not published: cannot map %s: %s", tmp,
                     strerror(-rc));
        goto fail;
    }
    pub->wake = m;
    return 0;
fail:
    unlink(tmp);
    return rc;
}

/* Gives the filled segment its real name. A stale one of our own pid in
 * our pid namespace (a program that exec'd, or died and had its pid
 * reused) is replaced. */
static int link_segment(struct publisher *pub, const char *tmp)
{
    int rc = link(tmp, pub->path) ? -errno : 0;
    if (rc == -EEXIST) {
        unlink(pub->path);
        rc = link(tmp, pub->path) ? -errno : 0;
    }
    unlink(tmp);
    if (rc)
        ump_log_warn("statistics not published: cannot link %s: %s",
                     pub->path, strerror(-rc));
    return rc;
}

/* Asks the thread to end and waits for it. */
static void stop_thread(struct publisher *pub)
{
    atomic_store(&pub->stop, true);
    atomic_store(&pub->quit, 1);
    syscall(SYS_futex, (uint32_t *)&pub->quit, FUTEX_WAKE_PRIVATE, INT_MAX,
            NULL, NULL, 0);
    syscall(SYS_futex, request_word(pub), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    pthread_join(pub->thread, NULL);
}

static void set_pub(ump_pool_t *pool, void *pub) { pool->observer_state = pub; }

static void take_pub(ump_pool_t *pool, void *pub_p)
{
    *(struct publisher **)pub_p = pool->observer_state;
    pool->observer_state = NULL;
}

int publish_start(ump_pool_t *pool)
{
    pthread_once(&pubs_once, publish_global_init);
    struct publisher *pub = calloc(1, sizeof(*pub));
    if (!pub)
        return -ENOMEM;
    pub->pool = pool;
    pub->pool_id = pool->id;
    pub->pid = getpid();
    pub->fd = -1;
    pub->ndev = (uint32_t)pool->ndev;
    pub->max_allocs = SNAP_ALLOCS;
    pub->map_cap = SNAP_MAP_ENTRIES;
    pub->size = snap_size(pub->ndev, pub->max_allocs, pub->map_cap);
    char tmp[128];
    int rc = create_segment(pub, tmp, sizeof(tmp));
    if (rc) {
        pub_free(pub);
        return rc;
    }
    pub->body = calloc(1, pub->size - sizeof(struct snap_header));
    pub->fine = calloc(pub->ndev, sizeof(*pub->fine));
    if (!pub->body || !pub->fine) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t d = 0; d < pub->ndev; d++) {
        pub->fine[d].runs = malloc(FINE_MIN * sizeof(struct snap_run));
        if (!pub->fine[d].runs) {
            rc = -ENOMEM;
            goto fail;
        }
        pub->fine[d].cap = FINE_MIN;
    }
    refresh(pub);
    if (pub->broken) {
        rc = -EIO;
        goto fail;
    }
    /* The thread takes no signal meant for the program. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&pub->thread, NULL, publisher_main, pub);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        ump_log_warn("statistics not published: no thread: %s",
                     strerror(-rc));
        goto fail;
    }
    pthread_setname_np(pub->thread, "umpool-publish");
    rc = link_segment(pub, tmp);
    if (rc) {
        stop_thread(pub);
        pub_free(pub);
        return rc;
    }
    /* Published under the registry lock, which the exit handler and the
     * fork handlers walk pools under. */
    registry_with_pool(pool, pool->id, set_pub, pub);
    return 0;
fail:
    unlink(tmp);
    pub_free(pub);
    return rc;
}

void publish_stop(ump_pool_t *pool)
{
    struct publisher *pub = NULL;
    if (!registry_with_pool(pool, pool->id, take_pub, &pub)) {
        /* a pool leaving the registry (a child's copy): no race left */
        pub = pool->observer_state;
        pool->observer_state = NULL;
    }
    if (!pub)
        return;
    if (pub->pid == getpid()) {
        stop_thread(pub);
        unlink_own(pub);
    }
    pub_free(pub);
}
