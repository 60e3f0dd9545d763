/*
 * A communicator (comm.c makes it; calls.c runs the collectives on it;
 * check.c checks their arguments).
 */
#ifndef UMP_COLL_COMM_H
#define UMP_COLL_COMM_H

#include <pthread.h>

#include "coll/coll.h"
#include "mem/pool.h"

struct ump_comm {
    ump_pool_t *pool;
    int n;     /* this process's ranks */
    int nall;  /* every process's (n on a one-process communicator) */
    int first; /* the global rank of local rank 0 */
    struct coll_world *world; /* NULL: one process (world.h) */
    int engine_pref;   /* coll_engine: enum coll_engine_pref (world.h) */
    double timeout_s;  /* comm_timeout */
    int sched;         /* coll_schedule: enum coll_sched (world.h) */
    int dev[COLL_MAX_RANKS];
    ump_stream_t own[COLL_MAX_RANKS]; /* for calls with streams NULL */
    int force;                        /* coll_algo:NAME, or -1 */
    struct coll_topo topo;            /* the cost model's view */
    /* One call queues its ranks at a time: two threads calling on one
     * communicator would otherwise interleave their ranks' work on the
     * streams and each wait for the other's ranks. */
    pthread_mutex_t lock;
    /* Finished jobs holding acquired buffers, to release (calls.c). */
    pthread_mutex_t done_lock;
    struct coll_job *done;
    /* (done_lock) The executed schedule's modeled time of the last call to
     * finish (the sim's virtual-time link model, model.h); NAN: none yet,
     * or the schedule outgrew its log. */
    double last_us;
    /* The algorithms each collective may use (bits 1u << enum coll_algo):
     * every one on sim, the GPU executor's on cuda (gpu.h). */
    unsigned algos[COLL_NCOLL];
    /* The GPU executor (gpu.c): false on sim (which uses only ev below). */
    bool gpu;
    bool reach_all; /* every device of the pool maps every other's memory */
    void *ev[COLL_MAX_RANKS]; /* (lock) rank r's event: gpu.c's barriers, a
                                 fan's joins (sim: NULL without them) */
    void *last; /* (lock) recorded on rank 0's stream after each call */
    /* (lock) Pinned host copies of the send buffers of ranks some peer
     * cannot reach (cuMemHostRegister'ed), grown as calls need. */
    void *stage[COLL_MAX_RANKS];
    size_t stage_len[COLL_MAX_RANKS];
    struct coll_gjob *gjobs; /* (done_lock) calls holding acquired buffers */
};

/* The communicator's keys ("key:value,...") into c (coll_algo,
 * coll_engine, comm_timeout). */
int coll_comm_config(ump_comm_t *c, const char *config, const char *fn);
/* A communicator of this process's ndev ranks on devices (NULL: every
 * device), not yet usable: the configuration and devices set, no streams.
 * Freed with free(). */
int coll_comm_alloc(ump_pool_t *pool, int ndev, const int *devices,
                    const char *config, const char *fn, ump_comm_t **c_p);

/* The first of c's local ranks whose device has failed, or is failing
 * (the backend told, the pool has not handled it yet); -1: none. Lock
 * free: two loads when no device has failed. */
int coll_comm_failed_rank(const ump_comm_t *c);
/* Has local rank r's device failed (or is failing: told, not handled)? */
bool coll_rank_failed(const ump_comm_t *c, int r);
/* -EIO, with one log line "fn: rank R's device D has failed ...", when
 * coll_comm_failed_rank finds one; else 0. */
int coll_comm_check_failed(const ump_comm_t *c, const char *fn);

/* ump_comm_create's work, for the public calls and a world's local part:
 * a one-process communicator with the configuration from config, or a
 * copy of like's (ump_comm_shrink: the same keys without the string);
 * errors are logged under fn. */
int coll_comm_make(ump_pool_t *pool, int ndev, const int *devices,
                   const char *config, const ump_comm_t *like, const char *fn,
                   ump_comm_t **comm_p);

/* ump_comm_destroy's work once the pool is checked: the communicator and
 * everything it holds freed (a world's through coll_world_destroy). */
int coll_comm_free(ump_comm_t *comm);

/* Records us as the last call's executed modeled time (calls.c, from the
 * job's last rank). */
void coll_comm_set_last_us(ump_comm_t *c, double us);
/* The last call's executed modeled time: 0, or -ENODATA when no call has
 * finished with one. */
int coll_comm_last_us(ump_comm_t *c, double *us_p);

/* Releases the buffers of the communicator's finished jobs and frees
 * them (run.c). */
void coll_comm_reap(ump_comm_t *c);

/* The algorithm for coll of bytes (nccl-tests' S): the forced one where it
 * runs that collective (and the executor has it), else the cost model's
 * choice among c->algos[coll]; its modeled time. COLL_NALGO (and INFINITY)
 * when the executor runs no algorithm for coll. */
int coll_comm_algo(const ump_comm_t *c, int coll, size_t bytes, double *us_p);

/* ump_comm_plan of a one-process communicator (or a world's local part):
 * the algorithm and its modeled time; -ENOTSUP for a reduction the build
 * cannot run (no GPU kernel). The arguments are checked. */
int coll_comm_plan_local(const ump_comm_t *c, int coll, size_t count, int dt,
                         ump_coll_plan_t *plan_p);

/* nccl-tests' S: the bytes a collective of count elements of esz bytes
 * moves, in the sense coll_model_us takes. */
size_t coll_bytes(int coll, size_t count, size_t esz, int n);

/* Bytes a collective or point-to-point moved from location src to dst
 * (mem/traffic.h), for ump_link_stats. */
static inline void coll_traffic(ump_pool_t *pool, int src, int dst,
                                size_t bytes)
{
    traffic_add(&pool->traffic, TRAFFIC_COLL, src, dst, bytes);
}
/* The location of p for those counters: the device whose memory holds it
 * (its first byte), else the host (host-tier memory, malloc'ed staging). */
int coll_loc(ump_pool_t *pool, const void *p);

#endif
