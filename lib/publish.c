/*
 * Each pool publishes its statistics in /dev/shm for umpool-inspect (see
 * publish.h and snapshot.h). The segment is created under a hidden name,
 * filled, then linked under its real name, so a reader never sees one
 * half made; it is unlinked at ump_pool_destroy, and at exit for pools
 * never destroyed. Segments of processes that died are left for
 * `umpool-inspect list --clean`, which recognises them by their pid.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "publish.h"

#define MSEC 1000000ull
#define MIN_PERIOD (100 * MSEC)  /* refreshes at most this often */
#define IDLE_PERIOD (1000 * MSEC) /* ... and this often when nobody reads */
#define WATCH_TIME (5000 * MSEC)  /* a reader's request counts this long */
#define TICK (100 * MSEC)         /* the thread wakes at least this often */

/* A device's fine map while a refresh builds it. */
struct fine_map {
    struct snap_run *runs;
    size_t n, cap;
};

struct publisher {
    ump_pool_t *pool;
    uint64_t pool_id;
    pid_t pid;             /* the process that created the segment */
    char path[128];        /* SNAP_DIR/umpool-... */
    struct snap_header *seg;
    size_t size;
    char *body;            /* the next refresh, built beside the segment */
    struct fine_map *fine; /* per device */
    ump_alloc_info_t top[SNAP_ALLOCS];
    pthread_t thread;
    _Atomic bool stop;
    struct publisher *next;
};

/* Publishers of this process (pool.h has no field for them yet). */
static pthread_mutex_t pubs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct publisher *pubs;
static pthread_once_t pubs_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pools a program never destroyed: their names go at exit. trylock: exit()
 * may run while another thread holds the lock. */
static void publish_atexit(void)
{
    if (pthread_mutex_trylock(&pubs_lock))
        return;
    for (struct publisher *p = pubs; p; p = p->next)
        if (p->pid == getpid())
            unlink(p->path);
    pthread_mutex_unlock(&pubs_lock);
}

static void pubs_prefork(void) { pthread_mutex_lock(&pubs_lock); }
static void pubs_postfork(void) { pthread_mutex_unlock(&pubs_lock); }

static void publish_global_init(void)
{
    atexit(publish_atexit);
    pthread_atfork(pubs_prefork, pubs_postfork, pubs_postfork);
}

/* ---- one refresh -------------------------------------------------------- */

static void fine_add(void *arg, const struct stats_piece *p)
{
    struct publisher *pub = arg;
    struct fine_map *f = &pub->fine[p->device];
    if (f->n && f->runs[f->n - 1].state == p->state) {
        f->runs[f->n - 1].n += p->n;
        return;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 64;
        struct snap_run *r = realloc(f->runs, cap * sizeof(*r));
        if (!r) { /* the picture blurs; the totals stay right */
            if (f->n)
                f->runs[f->n - 1].n += p->n;
            return;
        }
        f->runs = r;
        f->cap = cap;
    }
    f->runs[f->n++] = (struct snap_run){p->state, p->n};
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
}

/* Builds a snapshot and publishes it. Pool lock not held: taken here
 * while the figures are copied, not while the picture is drawn. */
static void refresh(struct publisher *pub)
{
    ump_pool_t *pool = pub->pool;
    const struct snap_header *h = pub->seg;
    size_t hs = sizeof(*h);
    struct snap_data *data = (struct snap_data *)pub->body;
    struct snap_device *dev = (struct snap_device *)(pub->body +
                                                     snap_off_dev() - hs);
    struct snap_alloc *alloc =
        (struct snap_alloc *)(pub->body + snap_off_alloc(h->ndev) - hs);
    struct snap_map *map = (struct snap_map *)(
        pub->body + snap_off_map(h->ndev, h->max_allocs) - hs);
    uint64_t generation = data->generation;

    memset(pub->body, 0, h->total_size - hs);
    read_tiers(pool, data);
    for (uint32_t d = 0; d < h->ndev; d++)
        pub->fine[d].n = 0;
    pthread_mutex_lock(&pool->lock);
    size_t in_blocks = 0;
    for (uint32_t d = 0; d < h->ndev; d++) {
        fill_device(pool, (int)d, &dev[d]);
        if (dev[d].largest_free > data->largest_free)
            data->largest_free = dev[d].largest_free;
        in_blocks += pool->dev[d].cached;
    }
    data->peak_bytes = pool->peak;
    data->fragmentation =
        in_blocks ? 1.0 - (double)data->largest_free / (double)in_blocks : 0.0;
    size_t k = stats_largest(pool, UMP_DEVICE_ALL, pub->top, h->max_allocs);
    stats_walk(pool, fine_add, pub);
    pthread_mutex_unlock(&pool->lock);

    for (uint32_t d = 0; d < h->ndev; d++) {
        const struct fine_map *f = &pub->fine[d];
        uint64_t per;
        dev[d].map_count = snap_map_encode(f->runs, f->n, h->map_cap,
                                           map + (size_t)d * h->map_cap, &per);
        dev[d].map_unit = per << pool->chunk_shift;
        for (size_t i = 0; i < f->n; i++)
            dev[d].state_bytes[f->runs[i].state] += f->runs[i].n
                                                    << pool->chunk_shift;
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
    data->generation = generation + 1;
    data->updated_ns = now_ns(CLOCK_REALTIME);
    data->chunk_size = pool->chunk_size;
    data->va_size = pool->vas.size;
    snap_publish(pub->seg, pub->body);
}

/* ---- the thread --------------------------------------------------------- */

/* Sleeps until *word is no longer val, a wake, or ns nanoseconds. Not a
 * private futex: readers in other processes wake it through their own
 * mapping of the segment. */
static void futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull),
                          (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void *publisher_main(void *arg)
{
    struct publisher *pub = arg;
    _Atomic uint32_t *req = &pub->seg->request;
    uint32_t seen = atomic_load(req);
    uint64_t last = now_ns(CLOCK_MONOTONIC), watched_until = 0;
    bool asked = false;
    while (!atomic_load(&pub->stop)) {
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        uint64_t period = asked || now < watched_until ? MIN_PERIOD
                                                       : IDLE_PERIOD;
        if (now - last >= period) {
            refresh(pub);
            last = now_ns(CLOCK_MONOTONIC);
            asked = false;
            continue;
        }
        uint64_t wait = last + period - now;
        futex_wait(req, seen, wait < TICK ? wait : TICK);
        stats_clock_tick(pub->pool);
        uint32_t r = atomic_load(req);
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
        for (int d = 0; d < pub->pool->ndev; d++)
            free(pub->fine[d].runs);
    free(pub->fine);
    free(pub->body);
    if (pub->seg)
        munmap(pub->seg, pub->size);
    free(pub);
}

/* Fills the header's fixed fields. */
static void fill_header(struct publisher *pub)
{
    ump_pool_t *pool = pub->pool;
    struct snap_header *h = pub->seg;
    snap_header_init(h, (uint32_t)pool->ndev, SNAP_ALLOCS, SNAP_MAP_ENTRIES);
    h->uid = (uint32_t)getuid();
    h->pid = (int32_t)pub->pid;
    if (snap_proc_start(h->pid, &h->pid_start))
        h->pid_start = 0;
    h->pool_id = pool->id;
    h->created_ns = now_ns(CLOCK_REALTIME);
    snprintf(h->program, sizeof(h->program), "%s",
             program_invocation_short_name);
    snprintf(h->backend, sizeof(h->backend), "%s", pool->be->name);
    snprintf(h->topology, sizeof(h->topology), "%s", pool->topo.name);
}

/* Creates the segment under a hidden name and maps it. */
static int create_segment(struct publisher *pub, char *tmp, size_t tmplen)
{
    char name[96];
    int rc = snap_name(name, sizeof(name), (uint32_t)getuid(),
                       (int32_t)pub->pid, pub->pool_id);
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
    pub->size = snap_size((uint32_t)pub->pool->ndev, SNAP_ALLOCS,
                          SNAP_MAP_ENTRIES);
    if (ftruncate(fd, (off_t)pub->size)) {
        rc = -errno;
        ump_log_warn("statistics not published: cannot size %s: %s", tmp,
                     strerror(-rc));
        goto fail_fd;
    }
    void *seg = mmap(NULL, pub->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     0);
    if (seg == MAP_FAILED) {
        rc = -errno;
        ump_log_warn("statistics not published: cannot map %s: %s", tmp,
                     strerror(-rc));
        goto fail_fd;
    }
    close(fd);
    pub->seg = seg;
    return 0;
fail_fd:
    close(fd);
    unlink(tmp);
    return rc;
}

/* Gives the filled segment its real name. A stale one of our own pid (a
 * program that exec'd, or died and had its pid reused) is replaced. */
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

int publish_start(ump_pool_t *pool)
{
    pthread_once(&pubs_once, publish_global_init);
    struct publisher *pub = calloc(1, sizeof(*pub));
    if (!pub)
        return -ENOMEM;
    pub->pool = pool;
    pub->pool_id = pool->id;
    pub->pid = getpid();
    char tmp[128];
    int rc = create_segment(pub, tmp, sizeof(tmp));
    if (rc) {
        free(pub);
        return rc;
    }
    fill_header(pub);
    pub->body = calloc(1, pub->size - sizeof(struct snap_header));
    pub->fine = calloc((size_t)pool->ndev, sizeof(*pub->fine));
    if (!pub->body || !pub->fine) {
        rc = -ENOMEM;
        goto fail;
    }
    refresh(pub);
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
        atomic_store(&pub->stop, true);
        futex_wake(&pub->seg->request);
        pthread_join(pub->thread, NULL);
        pub_free(pub);
        return rc;
    }
    pthread_mutex_lock(&pubs_lock);
    pub->next = pubs;
    pubs = pub;
    pthread_mutex_unlock(&pubs_lock);
    return 0;
fail:
    unlink(tmp);
    pub_free(pub);
    return rc;
}

void publish_stop(ump_pool_t *pool)
{
    struct publisher *pub = NULL;
    pthread_mutex_lock(&pubs_lock);
    for (struct publisher **pp = &pubs; *pp; pp = &(*pp)->next)
        if ((*pp)->pool == pool && (*pp)->pool_id == pool->id) {
            pub = *pp;
            *pp = pub->next;
            break;
        }
    pthread_mutex_unlock(&pubs_lock);
    if (!pub)
        return;
    if (pub->pid == getpid()) {
        atomic_store(&pub->stop, true);
        atomic_fetch_add(&pub->seg->request, 1);
        futex_wake(&pub->seg->request);
        pthread_join(pub->thread, NULL);
        unlink(pub->path);
    }
    pub_free(pub);
}
