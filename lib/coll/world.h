/*
 * Communicators across processes (world.c makes them; hier.c runs the
 * collectives on them; p2p.c point-to-point; xchg.c moves the bytes
 * between processes).
 *
 * A communicator over several processes is a communicator of this
 * process's ranks (c->n of them, global ranks c->first ..) whose calls are
 * checked over every rank (c->nall), plus a coll_world: the processes,
 * their ranks, the data engine between them, and a plain communicator of
 * the local ranks (local) that runs the in-process phases with the pooled
 * algorithms of the collectives issue.
 */
#ifndef UMP_COLL_WORLD_H
#define UMP_COLL_WORLD_H

#include <stdbool.h>
#include <stddef.h>

#include "coll/check.h"
#include "coll/comm.h"
#include "umpool_engine.h"

enum coll_engine_pref { COLL_ENGINE_AUTO, COLL_ENGINE_MPI, COLL_ENGINE_NCCL };
/* coll_schedule: the cost model's choice, or one forced (allreduce). */
enum coll_sched { COLL_SCHED_AUTO, COLL_SCHED_FLAT, COLL_SCHED_HIER };

struct coll_world {
    int nproc, me;     /* processes, and this one */
    int *first, *nr;   /* per process: its first global rank, its ranks */
    int *node;         /* per process: its node (same host name, same node) */
    int nnode;
    bool engine;       /* eng is the data engine; else oob's allgather */
    ump_engine_t eng;
    /* The engine as the caller gave it, shared by the communicators
     * ump_comm_shrink made of this one (their eng maps their process
     * numbers to its): the last one destroyed destroys it. */
    struct coll_eng_share *share;
    ump_oob_t oob;     /* valid until destroy only without an engine */
    ump_comm_t *local; /* this process's ranks, a one-process communicator */
    struct coll_nccl *nccl; /* NCCL started: it carries point-to-point */
    /* (the comm's lock) A transfer failed or timed out: the processes no
     * longer agree on what was sent, so every later call fails with it. */
    int broken;
    /* (the comm's lock) The current call's part on this process failed
     * (-EIO: a failed device, a lost buffer): it runs on with stand-in
     * data so that its peers are not left waiting (hier.c). */
    int bad;
    /* (lock) The call's schedule carried the verdict in its own exchange
     * (the flat allreduce): no agreement round after it (hier.c). */
    bool agreed;
    /* (the comm's lock) Collective calls made on the communicator, every
     * one counted on every process: a call's transfers carry its number in
     * their tag, so that calls of different numbers never match. */
    unsigned seq;
    /* The order of communicators every process agrees on (they are made in
     * the same order by the processes they share): a group's transfers on
     * several communicators complete in this order everywhere. */
    unsigned long id;
    /* (the comm's lock) Host buffers the schedules receive into, kept and
     * grown from call to call: a fresh malloc of megabytes per call would
     * fault its pages in every time. */
    void *tmp[2];
    size_t tmp_len[2];
    /* (the comm's lock) The streams of staged allreduce's pipeline
     * (hier.c): pieces come down on [0] and go up on [1]; made at the
     * first staged call, on local rank 0's device. */
    ump_stream_t stage_st[2];
    bool stage_st_made;
    /* Every process shares one pool: calls run through its addresses
     * (shared.c), or NULL. */
    struct coll_shared *xs;
};

/* World w's host buffer slot (0 or 1) of at least bytes, kept for the next
 * calls; NULL when out of memory. Only a receive buffer: a failed call's
 * abandoned sends never read it. */
void *coll_world_tmp(struct coll_world *w, int slot, size_t bytes);

/* ump_comm_shrink of a communicator across processes: every process
 * calls it; bad: this process's verdict on the arguments (0, or -EINVAL
 * logged), keep[g]: global rank g stays (valid when bad is 0). The
 * verdicts and exclude lists are exchanged, so that every process returns
 * the same. */
int coll_world_shrink(ump_comm_t *c, int bad, int nexclude,
                      const int *exclude, const bool *keep,
                      ump_comm_t **newcomm_p);

/* The world's part of ump_comm_destroy. */
void coll_world_destroy(ump_comm_t *c);

/* Runs a collective over several processes (hier.c; one process runs on
 * world->local directly). The caller holds the comm's lock and checked the
 * arguments. */
int coll_world_run(ump_comm_t *c, const struct coll_args *a, int bad);

/* The schedule a world collective runs: "hierarchical" or "flat", and its
 * modeled time (ump_comm_plan). */
const char *coll_world_plan(ump_comm_t *c, int coll, size_t count, int dt,
                            double *us_p);

/* One transfer of an exchange: bytes of host memory (or device memory the
 * engine moves itself) to or from process proc. */
struct coll_msg {
    void *buf;
    size_t bytes;
    int proc;
    int tag;
    bool send;
    int seq; /* its place among a step's transfers (p2p.c sorts by it) */
};
#define COLL_TAG_P2P 1024  /* + source local rank * 32 + destination's */
#define COLL_TAG_COLL 4096 /* + the call's number modulo COLL_TAG_SEQS */
#define COLL_TAG_SEQS 8192
/* The tag of the transfers of the communicator's current call. */
static inline int coll_call_tag(const struct coll_world *w)
{
    return COLL_TAG_COLL + (int)(w->seq % COLL_TAG_SEQS);
}

/* Moves the messages: all started at once, then polled until done. With
 * an engine, only this process's messages; without one, every process
 * calls it the same number of times (a collective through the oob's
 * allgather). A transfer not done within the comm's timeout, or failed,
 * breaks the comm (-ETIMEDOUT, -EIO). */
int coll_xchg(ump_comm_t *c, struct coll_msg *m, int nm, const char *fn);
/* Counts an exchange that went through: each message's bytes between its
 * buffer's location and the network (comm.h: coll_traffic). coll_xchg
 * does; a caller of another transport (NCCL) calls it itself. */
void coll_xchg_traffic(ump_comm_t *c, const struct coll_msg *m, int nm);

/* Memory the CPU may read and write directly: every sim buffer, host-tier
 * memory on cuda. */
bool coll_host_ok(ump_pool_t *pool, const void *p);
/* Host memory of len bytes the devices copy to and from at the link's
 * speed: the pool's own cached pinned memory (ump_host_alloc), not pinned
 * per call, or malloc'd memory where the pool has no more of it
 * (pinned_limit). Freed by coll_stage_free. */
void *coll_stage_alloc(ump_pool_t *pool, size_t len);
void coll_stage_free(ump_pool_t *pool, void *h);
/* A host view of len bytes at p: p itself when the CPU reaches it, else a
 * host copy (*h from coll_stage_alloc; copy: fill it from p). */
int coll_stage_in(ump_comm_t *c, void *p, size_t len, bool copy, void **h);
/* The view's end: back into p when copy (and a copy was made), then
 * dropped (coll_stage_drop). */
int coll_stage_out(ump_comm_t *c, void *p, void *h, size_t len, bool copy);
/* Frees staging memory h of coll_stage_alloc. Once the communicator
 * failed, an abandoned send may still read it whenever its peer takes the
 * message (MPI cannot take a send back, nor say when it is done with it),
 * even after ump_comm_destroy: malloc'd memory is then never freed (a
 * failed communicator costs its last call's staging memory), the pool's
 * pinned memory goes back to the pool, which keeps it mapped until it
 * trims or is destroyed (a pool with a live allocation could not be
 * destroyed at all). */
void coll_stage_drop(ump_comm_t *c, void *h);

#endif
