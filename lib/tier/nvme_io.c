/*
 * The NVMe store's I/O (contract in nvme.h): batches of slot transfers
 * through io_uring or a pread/pwrite thread pool, retries, crc32c summed
 * while writing and checked after reading, and the fault hook of tests.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "tier/nvme_store.h"

int nvme_inject_fault(struct nvme_store *st, const char *what, int nth)
{
    static const struct { const char *name; enum nvme_fault f; } kinds[] = {
        { "eio", NVME_F_EIO }, { "enospc", NVME_F_ENOSPC },
        { "short_write", NVME_F_SHORT }, { "corrupt", NVME_F_CORRUPT },
    };

    if (!st || nth < 0)
        return -EINVAL;
    if (nth == 0) {
        st->fault = NVME_F_NONE;
        st->fault_nth = 0;
        return 0;
    }
    for (size_t i = 0; what && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(what, kinds[i].name) == 0) {
            st->fault = kinds[i].f;
            st->fault_nth = nth;
            return 0;
        }
    }
    return -EINVAL;
}

static enum nvme_fault nvme_fault_take(struct nvme_store *st)
{
    if (st->fault == NVME_F_NONE || --st->fault_nth > 0)
        return NVME_F_NONE;

    enum nvme_fault f = st->fault;

    st->fault = NVME_F_NONE;
    return f;
}

/* Length of the next transfer of rq; a short fault halves the first one. */
static size_t nvme_req_len(const struct nvme_store *st,
                           const struct nvme_req *rq)
{
    size_t len = st->slot_size - rq->done;

    if (rq->fault == NVME_F_SHORT && rq->done == 0)
        len = nvme_max(len / 2 / st->align * st->align, st->align);
    return len < NVME_MAX_XFER ? len : NVME_MAX_XFER;
}

/* Accounts one completion; true when rq is finished (io->res set). A read
 * that returns 0 met the end of the file: -EIO at once, as for a direct
 * read that stopped off the alignment (only the end of the file does that:
 * the rest would be refused, EINVAL). */
static bool nvme_req_complete(const struct nvme_store *st, struct nvme_req *rq,
                              long res)
{
    if ((res == -EAGAIN || res == -EINTR) && ++rq->retries < NVME_RETRIES)
        return false;
    if (res <= 0) {
        rq->io->res = res < 0 ? (int)res : -EIO;  /* 0: the file ended */
        return true;
    }
    rq->done += (size_t)res;
    if (rq->done < st->slot_size) {
        if (!rq->write && rq->dir->direct && rq->done % st->align) {
            rq->io->res = -EIO;
            return true;
        }
        return false;
    }
    rq->io->res = 0;
    return true;
}

/* A finished read: its data against the slot's crc32c (-EIO, logged, on a
 * mismatch). */
static void nvme_req_verify(const struct nvme_store *st, struct nvme_req *rq)
{
    if (rq->write || rq->io->res < 0)
        return;
    if (rq->fault == NVME_F_CORRUPT)
        ((unsigned char *)rq->io->buf)[7] ^= 0xff;
    if (crc32c(0, rq->io->buf, st->slot_size) !=
        st->slots[rq->io->slot].crc) {
        ump_log_error("nvme: crc32c mismatch reading slot %llu",
                      (unsigned long long)rq->io->slot);
        rq->io->res = -EIO;
    }
}

static void nvme_req_sync(const struct nvme_store *st, struct nvme_req *rq)
{
    nvme_req_sum(st, rq);
    for (;;) {
        size_t len = nvme_req_len(st, rq);
        char *buf = (char *)rq->io->buf + rq->done;
        off_t off = rq->off + (off_t)rq->done;
        ssize_t r = rq->write ? pwrite(rq->dir->fd, buf, len, off)
                              : pread(rq->dir->fd, buf, len, off);

        if (nvme_req_complete(st, rq, r < 0 ? -errno : (long)r)) {
            nvme_req_verify(st, rq);
            return;
        }
    }
}

struct nvme_batch {
    const struct nvme_store *st;
    struct nvme_req *rq;
    size_t n;
    atomic_size_t next;
};

static void *nvme_worker(void *arg)
{
    struct nvme_batch *b = arg;
    size_t i;

    while ((i = atomic_fetch_add(&b->next, 1)) < b->n)
        nvme_req_sync(b->st, &b->rq[i]);
    return NULL;
}

/* The fallback engine: a few threads share the batch; the caller works too,
 * so a failed pthread_create only costs parallelism. */
static void nvme_run_threads(struct nvme_store *st, struct nvme_req *rq,
                             size_t n)
{
    struct nvme_batch b = { .st = st, .rq = rq, .n = n };
    pthread_t tid[NVME_THREADS - 1];
    int nt = 0;

    atomic_init(&b.next, 0);
    while (nt < NVME_THREADS - 1 && (size_t)nt + 1 < n &&
           pthread_create(&tid[nt], NULL, nvme_worker, &b) == 0)
        nt++;
    nvme_worker(&b);
    for (int t = 0; t < nt; t++)
        pthread_join(tid[t], NULL);
}

#ifdef HAVE_LIBURING
static void nvme_prep(struct nvme_store *st, struct nvme_req *rq,
                      struct io_uring_sqe *sqe, size_t i)
{
    size_t len = nvme_req_len(st, rq);
    char *buf = (char *)rq->io->buf + rq->done;
    off_t off = rq->off + (off_t)rq->done;
    unsigned idx;

    if (st->fixed && nvme_in_arena(st, rq->io->buf, &idx)) {
        if (rq->write)
            io_uring_prep_write_fixed(sqe, rq->dir->fd, buf, (unsigned)len,
                                      (uint64_t)off, (int)idx);
        else
            io_uring_prep_read_fixed(sqe, rq->dir->fd, buf, (unsigned)len,
                                     (uint64_t)off, (int)idx);
    } else if (rq->write) {
        io_uring_prep_write(sqe, rq->dir->fd, buf, (unsigned)len,
                            (uint64_t)off);
    } else {
        io_uring_prep_read(sqe, rq->dir->fd, buf, (unsigned)len,
                           (uint64_t)off);
    }
    io_uring_sqe_set_data64(sqe, i);
}

/* Reaps what dir's ring has completed: unfinished requests back to pend,
 * finished ones to done (for nvme_req_verify). */
static void nvme_reap(struct nvme_store *st, struct nvme_dir *dir,
                      struct nvme_req *rq, size_t *pend, size_t *npend,
                      size_t *done, size_t *ndone)
{
    struct io_uring_cqe *cqe;

    while (dir->inflight && io_uring_peek_cqe(&dir->ring, &cqe) == 0) {
        size_t i = (size_t)io_uring_cqe_get_data64(cqe);
        long res = cqe->res;

        io_uring_cqe_seen(&dir->ring, cqe);
        dir->inflight--;
        if (!nvme_req_complete(st, &rq[i], res))
            pend[(*npend)++] = i;
        else
            done[(*ndone)++] = i;
    }
}

/* The kernel took none of the prepared sqes: fail their requests and drop
 * them from the ring (sqe_head..sqe_tail are liburing's unsubmitted ones),
 * so that no stale request reaches the kernel with a later submit. */
static void nvme_submit_failed(struct nvme_dir *dir, struct nvme_req *rq,
                               int err)
{
    struct io_uring_sq *sq = &dir->ring.sq;

    ump_log_error("nvme: io_uring submit failed: %s", strerror(-err));
    for (unsigned h = sq->sqe_head; h != sq->sqe_tail; h++) {
        struct io_uring_sqe *sqe = &sq->sqes[h & sq->ring_mask];

        rq[(size_t)sqe->user_data].io->res = err;
    }
    sq->sqe_tail = sq->sqe_head;
    dir->queued = 0;
}

/* Runs the batch through the rings, at most qd in flight per ring. A failed
 * submission finishes the requests it held with its error. pend, sent and
 * done have room for n indices each. */
static void nvme_run_uring(struct nvme_store *st, struct nvme_req *rq,
                           size_t n, size_t *pend, size_t *sent, size_t *done)
{
    size_t npend = n, ndone = 0;

    for (size_t i = 0; i < n; i++)
        pend[i] = i;
    for (;;) {
        size_t keep = 0, nsent = 0;
        unsigned busy = 0;

        for (size_t k = 0; k < npend; k++) {
            struct nvme_req *r = &rq[pend[k]];
            struct io_uring_sqe *sqe = NULL;

            if (r->dir->inflight + r->dir->queued < st->qd)
                sqe = io_uring_get_sqe(&r->dir->ring);
            if (!sqe) {
                pend[keep++] = pend[k];
                continue;
            }
            nvme_prep(st, r, sqe, pend[k]);
            r->dir->queued++;
            sent[nsent++] = pend[k];
        }
        npend = keep;
        for (int d = 0; d < st->ndirs; d++) {
            struct nvme_dir *dir = &st->dirs[d];

            int tries = 0;

            while (dir->queued) {
                int ret = io_uring_submit(&dir->ring);

                if ((ret == -EINTR || ret == -EAGAIN || ret == -EBUSY) &&
                    ++tries < NVME_RETRIES)
                    continue;
                if (ret <= 0) {
                    nvme_submit_failed(dir, rq, ret < 0 ? ret : -EIO);
                    break;
                }
                dir->inflight += (unsigned)ret;
                dir->queued -= (unsigned)ret;
            }
            busy += dir->inflight;
        }
        /* The disk has work: now the CPU's share, on what it holds. */
        for (size_t k = 0; k < nsent; k++)
            nvme_req_sum(st, &rq[sent[k]]);
        for (size_t k = 0; k < ndone; k++)
            nvme_req_verify(st, &rq[done[k]]);
        ndone = 0;
        if (!busy && !npend)
            return;
        for (int d = 0; d < st->ndirs; d++) {
            struct nvme_dir *dir = &st->dirs[d];
            struct io_uring_cqe *cqe;

            if (!dir->inflight)
                continue;
            if (io_uring_wait_cqe(&dir->ring, &cqe) < 0)
                continue;     /* interrupted: peek below, then loop */
            nvme_reap(st, dir, rq, pend, &npend, done, &ndone);
        }
    }
}
#endif

static void nvme_corrupt_on_disk(const struct nvme_store *st,
                                 const struct nvme_req *rq)
{
    void *tmp;

    if (posix_memalign(&tmp, st->align, st->align) != 0)
        return;
    if (pread(rq->dir->fd, tmp, st->align, rq->off) == (ssize_t)st->align) {
        ((unsigned char *)tmp)[7] ^= 0xff;
        if (pwrite(rq->dir->fd, tmp, st->align, rq->off) < 0)
            ump_log_debug("nvme: corrupt fault not applied: %s",
                          strerror(errno));
    }
    free(tmp);
}

/* Checks each request, draws its fault, runs the batch, then checks crcs. */
static int nvme_io_batch(struct nvme_store *st, struct nvme_io *io, size_t n,
                         bool write)
{
    if (!st || (!io && n))
        return -EINVAL;
    if (n == 0)
        return 0;

    struct nvme_req *rq = calloc(n, sizeof(*rq));
    size_t *pend = calloc(3 * n, sizeof(*pend)); /* pend, sent, done */
    size_t nrun = 0;
    int first = 0;

    if (!rq || !pend) {
        free(rq);
        free(pend);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t s = io[i].slot;

        io[i].res = 0;
        if (s >= st->cap || !st->slots[s].used || !io[i].buf ||
            (uintptr_t)io[i].buf % st->align) {
            io[i].res = -EINVAL;
            continue;
        }
        if (write && st->rdonly) {
            io[i].res = -EBADF;
            continue;
        }
        if (!write && !st->slots[s].valid) {
            ump_log_error("nvme: slot %llu holds no written data",
                          (unsigned long long)s);
            io[i].res = -ENODATA;
            continue;
        }
        if (write)
            st->slots[s].valid = false;

        struct nvme_req *r = &rq[nrun];

        r->io = &io[i];
        r->dir = nvme_slot_dir(st, s, &r->off);
        r->write = write;
        r->fault = nvme_fault_take(st);
        if (r->fault == NVME_F_EIO || r->fault == NVME_F_ENOSPC) {
            io[i].res = r->fault == NVME_F_EIO ? -EIO : -ENOSPC;
            continue;
        }
        nrun++;
    }

#ifdef HAVE_LIBURING
    if (st->uring)
        nvme_run_uring(st, rq, nrun, pend, pend + n, pend + 2 * n);
    else
#endif
        nvme_run_threads(st, rq, nrun);

    for (size_t k = 0; write && k < nrun; k++) { /* reads: checked already */
        struct nvme_req *r = &rq[k];
        struct nvme_slot *slot = &st->slots[r->io->slot];

        if (r->io->res < 0)
            continue;
        slot->crc = r->crc;
        slot->valid = true;
        if (r->fault == NVME_F_CORRUPT)
            nvme_corrupt_on_disk(st, r);
    }
    for (size_t i = 0; i < n && !first; i++)
        first = io[i].res;
    free(pend);
    free(rq);
    return first;
}

int nvme_write(struct nvme_store *st, struct nvme_io *io, size_t n)
{
    return nvme_io_batch(st, io, n, true);
}

int nvme_read(struct nvme_store *st, struct nvme_io *io, size_t n)
{
    return nvme_io_batch(st, io, n, false);
}
