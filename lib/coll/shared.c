/*
 * Collectives across the processes of one shared pool (shared.h).
 *
 * A control segment (POSIX shared memory that process 0 makes, every
 * process maps, and process 0 unlinks once all have it) holds two
 * barriers (xbar.h) and, per rank, the call's buffers: their addresses
 * and an IPC handle of each one's allocation. A call:
 *  1. each process exports its ranks' buffers (ump_ipc_get_handle of
 *     their allocations: an allocation that is exported already keeps its
 *     export) and writes them into its ranks' slots, with its verdict
 *     (every buffer exportable, its devices sound); barrier;
 *  2. when every verdict is yes, each process opens the other processes'
 *     allocations it has not open yet (in place: the shared pool maps them
 *     at their addresses) and says whether that worked; barrier;
 *  3. when every process could, each queues its ranks' shares of one job
 *     over every rank (run.c: coll_run_across; xalgo.c), whose barriers
 *     meet across the processes. Otherwise every process runs the call's
 *     usual schedule (hier.c): the verdicts are the same everywhere.
 * What a process opened stays open for the next calls (most reuse their
 * buffers, as NCCL's registered buffers), at most XS_KEEP allocations not
 * used by the call at hand or the job still running, and is closed at
 * ump_comm_destroy (ipc_close_unnoted: each call gets fresh handles, so
 * the maker need not remember the closes). An
 * allocation kept open here stays its maker's even after its free (the
 * IPC rules), until then.
 *
 * On the sim step 3 is one job of host functions whose barriers meet
 * across the processes. On cuda a stream cannot wait for another
 * process's (that would need IPC events), so the processes meet on the
 * host: their streams idle before step 1, each launches its share after
 * step 2 and waits for it, and a third barrier says that every share is
 * done and whether it went well (xgpu.c). The collectives xgpu.c does not
 * take go between processes as before, on every process alike.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll/job.h"
#include "coll/kernel.h"
#include "coll/reduce.h"
#include "coll/run.h"
#include "coll/shared.h"
#include "coll/xgpu.h"
#include "front/check.h"
#include "ipc/ipc.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "util/log.h"

#define XS_MAGIC 0x554d5853484152ull /* "UMXSHAR" */
#define XS_KEEP 64

/* One rank's buffers for the call, and the call as its process sees it:
 * a process that left a call out (bad arguments, checked before) brings
 * its next one, whose number (the world's, which counts every call) or
 * arguments differ, and every process then takes the usual schedule,
 * whose numbered transfers fail the call rather than pair unlike ones. */
struct xs_slot {
    uint64_t seq;                /* the call's number (world.h: seq) */
    int32_t coll, dt, op, root;
    uint64_t count;
    uint64_t send, recv;         /* the call's pointers; 0: none */
    ump_ipc_handle_t hsend, hrecv; /* of their allocations */
};

struct xs_head {
    uint64_t magic;
    struct xbar call; /* the calling threads: two steps (cuda: three) */
    struct xbar job;  /* the ranks' barriers (job.c), on their streams */
    atomic_int lost;  /* job given up for a failed device (coll_xjob) */
};

/* An allocation of another process opened here, by its export. */
struct xs_open {
    uint64_t key, gen;
    void *ptr;
    uint64_t size; /* the allocation's, as its open checked it */
    uint64_t used; /* the last call that used it */
};

struct coll_shared {
    void *seg;
    size_t bytes;
    struct xs_head *head;
    int32_t *ok;          /* [2][nproc]: the verdicts, by the call's parity */
    int32_t *opened;      /* [nproc] */
    struct xs_slot *slot; /* [nall] */
    struct xs_open *open;
    size_t nopen, capopen;
    uint64_t calls;
    /* The call whose job may still run (on the caller's streams): what
     * it reads stays open until it is done (trim_opens). */
    uint64_t job_seq;
    struct coll_xjob x;
};

/* The segment: the head, the verdicts (ok[2][nproc], opened[nproc]),
 * then the slots from a cache line's start. */
static size_t slots_at(int nproc)
{
    size_t off = sizeof(struct xs_head) + 3 * (size_t)nproc * sizeof(int32_t);
    return (off + 63) & ~(size_t)63;
}

static size_t seg_bytes(int nproc, int nall)
{
    return slots_at(nproc) + (size_t)nall * sizeof(struct xs_slot);
}

static void layout(struct coll_shared *xs, int nproc)
{
    char *p = xs->seg;
    xs->head = (struct xs_head *)p;
    xs->ok = (int32_t *)(p + sizeof(struct xs_head));
    xs->opened = xs->ok + 2 * nproc;
    xs->slot = (struct xs_slot *)(p + slots_at(nproc));
}

/* What each process says at the start. */
struct xs_hello {
    char name[72];  /* its pool's shared name */
    uint64_t base;  /* its pool's addresses */
    int32_t ok;     /* it can run calls this way */
    char shm[64];   /* process 0: the segment's name */
};

int coll_shared_start(ump_comm_t *c, const ump_oob_t *oob)
{
    struct coll_world *w = c->world;
    int np = w->nproc;
    struct xs_hello me = {0};
    me.base = (uint64_t)(uintptr_t)c->pool->vas.base;
    /* on cuda: a kernel built in, every device reaching every other
     * (xgpu.h); else no call would go this way */
    const ump_comm_t *L = w->local;
    me.ok = c->sched == COLL_SCHED_AUTO && c->nall <= COLL_MAX_RANKS &&
            np > 1 && (!L->gpu || (coll_kernel_image && L->reach_all)) &&
            share_name(c->pool, me.name, sizeof(me.name));
    size_t bytes = seg_bytes(np, c->nall);
    int fd = -1;
    bool made = false;
    if (me.ok && w->me == 0) {
        uint32_t rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
            rnd = (uint32_t)getpid();
        snprintf(me.shm, sizeof(me.shm), "/umpool-coll-%d-%lu-%08x",
                 (int)getpid(), w->id, rnd);
        fd = shm_open(me.shm, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        made = fd >= 0;
        if (fd < 0 || ftruncate(fd, (off_t)bytes)) {
            ump_log_info("collectives through the shared pool: no control "
                         "segment (%s): between processes as before",
                         strerror(errno));
            me.ok = 0;
        }
    }
    struct xs_hello *all = calloc((size_t)np, sizeof(*all));
    int32_t *got = calloc((size_t)np, sizeof(*got));
    int rc = all && got ? 0 : -ENOMEM;
    /* Every process takes part in both exchanges whatever it found. */
    if (!rc)
        rc = oob->allgather(oob->ctx, &me, all, sizeof(me));
    bool use = !rc;
    for (int p = 0; use && p < np; p++)
        use = all[p].ok && all[p].base == all[0].base &&
              !strncmp(all[p].name, all[0].name, sizeof(all[p].name));
    struct coll_shared *xs = use ? calloc(1, sizeof(*xs)) : NULL;
    int32_t mine = 0;
    if (xs) {
        if (w->me != 0) {
            all[0].shm[sizeof(all[0].shm) - 1] = '\0';
            fd = shm_open(all[0].shm, O_RDWR | O_CLOEXEC, 0);
        }
        struct stat sb;
        if (fd >= 0 && !fstat(fd, &sb) && (size_t)sb.st_size == bytes) {
            xs->seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                           fd, 0);
            mine = xs->seg != MAP_FAILED;
        }
    }
    if (fd >= 0)
        close(fd);
    if (!rc)
        rc = oob->allgather(oob->ctx, &mine, got, sizeof(mine));
    if (made)
        shm_unlink(me.shm); /* every process has it mapped, or none uses it */
    for (int p = 0; use && p < np; p++)
        use = !rc && got[p];
    if (xs && !use) {
        if (mine)
            munmap(xs->seg, bytes);
        free(xs);
        xs = NULL;
    }
    if (xs) {
        xs->bytes = bytes;
        layout(xs, np);
        xs->x.bar = &xs->head->job;
        xs->x.nproc = np;
        xs->x.first = w->first;
        xs->x.nr = w->nr;
        xs->x.timeout_s = c->timeout_s;
        xs->x.lost = &xs->head->lost;
        atomic_init(&xs->x.inflight, 0);
        w->xs = xs;
        ump_log_info("ump_comm: the %d processes share the pool '%s': "
                     "collectives through its addresses", np, me.name);
    }
    free(all);
    free(got);
    return rc;
}

void coll_shared_stop(ump_comm_t *c)
{
    struct coll_shared *xs = c->world->xs;
    if (!xs)
        return;
    /* Jobs on the caller's streams may still read what is open, and
     * their barrier is in the segment: they end first (each within its
     * barriers' timeouts, so a wait with none of its own ends). */
    coll_xjob_idle(c->world->local, &xs->x, -1);
    for (size_t i = 0; i < xs->nopen; i++)
        ipc_close_unnoted(c->pool, xs->open[i].ptr);
    free(xs->open);
    munmap(xs->seg, xs->bytes);
    free(xs);
    c->world->xs = NULL;
}

/* The handle of the allocation holding p (device memory of this pool),
 * or false. */
static bool export_buf(ump_pool_t *pool, const void *p, ump_ipc_handle_t *h)
{
    ump_ptr_info_t info;
    if (ump_ptr_info(pool, p, &info) || info.kind != UMP_KIND_DEVICE ||
        info.lost)
        return false;
    log_mute(true); /* what cannot go this way goes the usual way */
    int rc = ump_ipc_get_handle(pool, info.base, h);
    log_mute(false);
    return rc == 0;
}

bool coll_shared_takes(const ump_comm_t *c, int coll)
{
    return c->world->xs && (!c->world->local->gpu || coll_xgpu_takes(coll));
}

/* Step 1: this process's ranks' buffers into their slots; its verdict. On
 * cuda, the caller's streams are idle first (xgpu.h). */
static bool publish(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_shared *xs = c->world->xs;
    ump_comm_t *L = c->world->local;
    bool ok = !c->world->bad && coll_comm_failed_rank(c) < 0 &&
              coll_shared_takes(c, a->coll) &&
              (!L->gpu || !coll_xgpu_enter(L, a));
    size_t s = a->count * coll_dtype_size(a->dt);
    for (int r = 0; r < c->n; r++) {
        struct xs_slot *sl = &xs->slot[c->first + r];
        struct coll_buf b[2];
        int k = coll_buffers(c, a, r, s, b);
        *sl = (struct xs_slot){.seq = c->world->seq, .coll = a->coll,
                               .dt = a->dt, .op = a->op, .root = a->root,
                               .count = a->count};
        for (int i = 0; ok && i < k; i++) {
            uint64_t p = (uint64_t)(uintptr_t)b[i].p;
            if (b[i].recv) {
                sl->recv = p;
                ok = export_buf(c->pool, b[i].p, &sl->hrecv);
            } else {
                sl->send = p;
                ok = export_buf(c->pool, b[i].p, &sl->hsend);
            }
        }
    }
    return ok;
}

/* Another process's buffer p of len bytes, in the allocation of handle
 * h, which is opened here at its address: p, or NULL when it cannot be
 * (the usual way then). The segment is another process's writing: a
 * buffer outside the allocation the handle opens is refused, not read or
 * written where it points. */
static void *open_buf(ump_comm_t *c, const ump_ipc_handle_t *h, uint64_t p,
                      size_t len, uint64_t seq)
{
    struct coll_shared *xs = c->world->xs;
    struct ipc_handle_fields f;
    log_mute(true);
    int rc = ipc_handle_unpack(h, &f, "ump_comm");
    log_mute(false);
    if (rc || p < f.addr || len > f.size || p - f.addr > f.size - len)
        return NULL;
    void *buf = (void *)(uintptr_t)p;
    for (size_t i = 0; i < xs->nopen; i++)
        if (xs->open[i].key == f.key && xs->open[i].gen == f.gen) {
            /* The handle's address and size as they were opened (the
             * maker checked them then), not as the slot says now. */
            const struct xs_open *o = &xs->open[i];
            if (f.addr != (uint64_t)(uintptr_t)o->ptr || f.size > o->size)
                return NULL;
            xs->open[i].used = seq;
            return buf;
        }
    if (xs->nopen == xs->capopen) {
        size_t cap = xs->capopen ? 2 * xs->capopen : 16;
        struct xs_open *n = realloc(xs->open, cap * sizeof(*n));
        if (!n)
            return NULL;
        xs->open = n;
        xs->capopen = cap;
    }
    void *q = NULL;
    if (ump_ipc_open(c->pool, h, &q))
        return NULL;
    if ((uint64_t)(uintptr_t)q != f.addr) { /* not in place: no use */
        ipc_close_unnoted(c->pool, q);
        return NULL;
    }
    xs->open[xs->nopen++] = (struct xs_open){f.key, f.gen, q, f.size, seq};
    return buf;
}

/* Opens beyond XS_KEEP that the call at hand does not use are closed,
 * the oldest first; not those a job of this process may still read (a
 * call on the caller's streams returns once its job is queued, and the
 * next call comes here at once): at most one job runs at a time
 * (coll_run_across waits for the one before), the job of call job_seq,
 * and it reads only what was used since. */
static void trim_opens(ump_comm_t *c, uint64_t seq)
{
    struct coll_shared *xs = c->world->xs;
    uint64_t keep = atomic_load(&xs->x.inflight) ? xs->job_seq : seq;
    for (size_t i = 0; xs->nopen > XS_KEEP && i < xs->nopen;) {
        if (xs->open[i].used >= keep) {
            i++;
            continue;
        }
        ipc_close_unnoted(c->pool, xs->open[i].ptr);
        memmove(&xs->open[i], &xs->open[i + 1],
                (xs->nopen - i - 1) * sizeof(*xs->open));
        xs->nopen--;
    }
}

/* Every process's verdict of the step (v: [nproc]), after the barrier;
 * -ETIMEDOUT (logged, the communicator broken) when a process never
 * came. */
static int meet(ump_comm_t *c, const char *fn)
{
    struct coll_world *w = c->world;
    if (xbar_wait(&w->xs->head->call, (uint32_t)w->nproc, c->timeout_s))
        return 0;
    /* A process that gave up because a job of its on a failed device did
     * (coll_shared_run's first check) says so: -EIO, not a time-out. */
    if (xbar_aborted(&w->xs->head->job) && atomic_load(&w->xs->head->lost)) {
        ump_log_error("%s: a device of a process of the shared pool's "
                      "communicator failed in an earlier call: -EIO "
                      "(destroy it)", fn);
        w->broken = -EIO;
        return -EIO;
    }
    ump_log_error("%s: a process of the shared pool's communicator gave "
                  "up or did not reach the call within comm_timeout (%g s): "
                  "-ETIMEDOUT", fn, c->timeout_s);
    w->broken = -ETIMEDOUT;
    return -ETIMEDOUT;
}

static bool all_yes(const int32_t *v, int np)
{
    for (int p = 0; p < np; p++)
        if (!v[p])
            return false;
    return true;
}

/* Step 3 on cuda: this process's share, then the third barrier, where
 * every process says whether its share went well (in done: the step-1
 * verdicts of this call's parity, which every process has read by step 2).
 * A share that failed fails the call everywhere: the results are
 * incomplete in every rank. */
static int run_gpu(ump_comm_t *c, const struct coll_args *a, int32_t *done,
                   const void *const *send, void *const *recv, void *scratch)
{
    struct coll_world *w = c->world;
    int rc = coll_xgpu_run(w->local, a, &w->xs->x, w->me, c->nall, send,
                           recv, scratch);
    done[w->me] = rc == 0;
    int mrc = meet(c, a->fn);
    if (mrc)
        return mrc;
    w->agreed = true; /* the third barrier carried every verdict */
    if (rc == -EIO)
        pool_check(c->pool, a->fn); /* the failed device handled first */
    if (rc) {
        ump_log_error("%s: this process's share of the call failed (%s): "
                      "what the call wrote is undefined", a->fn,
                      ump_strerror(rc));
        return rc;
    }
    if (all_yes(done, w->nproc))
        return 0;
    ump_log_error("%s: another process's share of the call failed: -EIO "
                  "(what the call wrote is undefined)", a->fn);
    return -EIO;
}

void coll_shared_give_up(ump_comm_t *c)
{
    /* Processes that came to this call already wait at its first
     * barrier, which this one never reaches: they fail now, not after
     * comm_timeout. */
    if (c->world->xs)
        xbar_abort(&c->world->xs->head->call);
}

int coll_shared_run(ump_comm_t *c, const struct coll_args *a)
{
    struct coll_world *w = c->world;
    struct coll_shared *xs = w->xs;
    int np = w->nproc;
    if (!xs)
        return 1;
    /* A job on streams that gave up (its process's or another's barrier
     * timed out) said nothing to its caller: the communicator is failed
     * from then on, here too. */
    if (xbar_aborted(&xs->head->job)) {
        bool lost = atomic_load(&xs->head->lost);
        ump_log_error("%s: an earlier call of the shared pool's "
                      "communicator failed (%s): destroy it", a->fn,
                      lost ? "a device of one of its processes failed"
                           : "a process gave up or did not come");
        w->broken = lost ? -EIO : -ETIMEDOUT;
        coll_shared_give_up(c);
        return w->broken;
    }
    uint64_t seq = ++xs->calls;
    int32_t *ok = xs->ok + (seq & 1) * (size_t)np;
    ok[w->me] = publish(c, a);
    int rc = meet(c, a->fn);
    if (rc)
        return rc;
    if (!all_yes(ok, np))
        return 1;
    const void *send[COLL_MAX_RANKS];
    void *recv[COLL_MAX_RANKS];
    bool mine = true, inplace = false;
    size_t s = a->count * coll_dtype_size(a->dt);
    /* The call as this process has it (its arguments, not its slots: any
     * process of the pool may write there). */
    for (int g = 0; mine && g < c->nall; g++) {
        const struct xs_slot *sl = &xs->slot[g];
        int r = g - c->first;
        if (sl->seq != c->world->seq || sl->coll != a->coll ||
            sl->dt != a->dt || sl->op != a->op || sl->root != a->root ||
            sl->count != a->count) {
            mine = false; /* processes out of step: the usual way */
            break;
        }
        bool used[2];
        size_t len[2];
        coll_buf_use(a, g, c->nall, s, used, len);
        if (r >= 0 && r < c->n) {
            send[g] = used[0] ? a->send[r] : NULL;
            recv[g] = used[1] ? a->recv[r] : NULL;
        } else {
            send[g] = used[0] ? open_buf(c, &sl->hsend, sl->send, len[0],
                                         seq)
                              : NULL;
            recv[g] = used[1] && (!used[0] || send[g])
                          ? open_buf(c, &sl->hrecv, sl->recv, len[1], seq)
                          : NULL;
            mine = (!used[0] || send[g]) && (!used[1] || recv[g]);
        }
        inplace |= send[g] && send[g] == recv[g];
    }
    trim_opens(c, seq);
    /* On cuda the share's scratch too, before any process commits. */
    void *scratch = NULL;
    if (mine && w->local->gpu)
        mine = !coll_xgpu_prepare(w->local, a, &xs->x, w->me, c->nall,
                                  &scratch);
    xs->opened[w->me] = mine;
    rc = meet(c, a->fn);
    if (!rc && !all_yes(xs->opened, np))
        rc = 1;
    if (rc) {
        if (scratch)
            ump_free(c->pool, scratch);
        return rc;
    }
    if (w->local->gpu)
        return run_gpu(c, a, ok, send, recv, scratch);
    struct coll_args la = *a;
    xs->job_seq = seq;
    rc = coll_run_across(w->local, &la, COLL_DIRECT, c->nall, c->first, send,
                         recv, inplace, &xs->x);
    if (rc == -ETIMEDOUT)
        w->broken = rc;
    w->agreed = true; /* the job's barriers carried every process's part */
    return rc;
}
