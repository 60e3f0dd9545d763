/*
 * IPC handles (issue 32; umpool.h: ump_ipc_*): what the files of lib/ipc
 * share. A pool that exported anything runs a server thread (server.c) on
 * a Unix socket named for the pool; an opener connects to it, asks for an
 * export's chunks and receives them as file descriptors (wire.h). The
 * exports (export.c) keep an allocation whose maker freed it while it is
 * open elsewhere; the imports (import.c) are the opener's mappings.
 *
 * Locks: the exports are under pool->lock (a free reaches them there);
 * the server's start and stop under srv_lock; the opener's peers and
 * imports under imp_lock, held across a request and its reply (a peer's
 * socket carries one exchange at a time). Order: imp_lock, then
 * srv_lock, then pool->lock.
 */
#ifndef UMP_IPC_IPC_H
#define UMP_IPC_IPC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem/pool.h"
#include "util/unixsock.h"

#define IPC_BUCKETS 256

/* One exported allocation of this pool: a run, or a slab object (its
 * state OBJ_EXPORTED while live), whose openers map its slab's granule. */
struct ipc_export {
    uint64_t gen;            /* this pool's export number, never reused */
    void *addr;              /* the allocation's start */
    struct run *run;         /* a run, or NULL ... */
    struct slab *slab;       /* ... a slab object: its slab and index */
    uint32_t idx;
    uint32_t opens;          /* opens by other pools now */
    bool freed;              /* its maker freed it: kept while opened */
    /* Its handles closed through a connection (server.c): refused
     * there from then on (a replay). Noted here, not on the connection,
     * so that they go with the export (whose handles then open nowhere
     * anyway) as well as with the connection (drop_conn takes its notes
     * back): a long-lived opener or a long-lived export alone keeps
     * none for ever. */
    struct ipc_closed { uint64_t conn, ticket; } *closed;
    uint32_t nclosed, capclosed;
    struct ipc_export *next; /* bucket chain, by its first granule */
};

/* A connected opener, on the server's side. Its opens are undone when it
 * goes (closes its socket, or dies). */
struct ipc_open {
    uint64_t gen, ticket;
    size_t g;                /* the granule of ... */
    uint64_t addr;           /* ... the export's address */
    uint32_t count;
};
struct ipc_conn {
    int fd;
    bool share;              /* on the shared pool's socket (share.h) */
    int slot;                /* its process's ledger slot, -1 before */
    struct ipc_open *opens;
    size_t nopens, capopens;
    uint64_t id;             /* the server's number for it, never reused */
    size_t notes;            /* closes noted on exports (ipc_export) */
};

/* A connection to another pool's server, on the opener's side. */
struct ipc_peer {
    uint32_t pid;
    uint64_t key;
    int fd;                  /* -1 once broken or gone */
    int pidfd;               /* the maker's process, or -1 */
    uint32_t imports;        /* of st->imports through it */
    struct ipc_peer *next;
};

/* A maker's chunks mapped here, over [va, va + bytes), for one or more
 * imports: those of the objects of one slab (whose replies name the same
 * chunks, the slab's) share it, so that each lands at its maker's address
 * in a shared pool, where a second mapping could not. */
struct ipc_mapping {
    void *va;                /* the reservation */
    size_t bytes;
    bool in_pool;            /* mapped in the pool's own reservation */
    size_t nchunks;
    struct ipc_mapped { size_t off, size; ump_handle_t h; } *chunks;
    uint32_t users;          /* imports on it */
};

/* One handle this pool opened. */
struct ipc_import {
    uint64_t key, gen, ticket;
    uint64_t addr;           /* the allocation in the maker (its export) */
    uint64_t base;           /* the maker's address of the mapping's start */
    struct ipc_mapping *map;
    void *ptr;               /* what ump_ipc_open returned */
    uint32_t refs;
    struct ipc_peer *peer;
    int slot;                /* the maker's in the shared pool, or -1 */
    struct ipc_import *next;
};

struct ipc_state {
    uint64_t key;            /* random: the pool's identity in handles */
    uint32_t pid;
    /* Exports, (L) pool->lock. */
    uint64_t next_gen, next_ticket;
    struct ipc_export *buckets[IPC_BUCKETS];
    /* The server, under srv_lock (its connections are its thread's while
     * it runs, and stop's after the join). */
    pthread_mutex_t srv_lock;
    bool serving;
    pthread_t thread;
    struct usock_listener listener;
    int wake[2];             /* a byte here stops the thread */
    struct ipc_conn *conns;
    size_t nconns, capconns;
    uint64_t next_conn;      /* the last connection's id */
    /* The pool's share when it is shared (share.h): its socket is served
     * too. Set by ump_pool_share before it wakes the thread. */
    struct share_state *_Atomic sharing;
    /* Imports, under imp_lock. */
    pthread_mutex_t imp_lock;
    struct ipc_peer *peers;
    struct ipc_import *imports;
};

/* The pool's IPC state, made (and the hooks installed) at the first call;
 * NULL, logged, when out of memory or no randomness. */
struct ipc_state *ipc_state_get(ump_pool_t *pool);
/* The socket name of pool (pid, key). */
void ipc_sock_name(uint32_t pid, uint64_t key, char *buf, size_t size);

/* export.c. The export at addr (in granule g) with number gen, or NULL.
 * Pool lock held. */
struct ipc_export *ipc_export_find(struct ipc_state *st, size_t g,
                                   const void *addr, uint64_t gen);
/* The granules export e's openers map: its run's, or its object's slab's
 * one. */
void ipc_export_range(const struct ipc_export *e, size_t *g_p, size_t *n_p);
/* One open of e less; the export is freed when its maker freed it and
 * this was the last. Pool lock held. */
void ipc_export_unopen(ump_pool_t *pool, struct ipc_export *e);
/* Whether connection conn closed e's handle ticket; and notes that it
 * did (-ENOMEM: not noted); and every note of conn taken back (it went).
 * Pool lock held. */
bool ipc_export_closed(const struct ipc_export *e, uint64_t conn,
                       uint64_t ticket);
int ipc_export_note_closed(struct ipc_export *e, uint64_t conn,
                           uint64_t ticket);
void ipc_exports_forget_conn(struct ipc_state *st, uint64_t conn);
/* Frees e itself (its closed list too); the caller unlinked it. */
void ipc_export_free(struct ipc_export *e);
/* Every export kept for openers is freed (the pool goes). Pool lock held. */
void ipc_exports_drop(ump_pool_t *pool);
bool ipc_run_freed(ump_pool_t *pool, struct run *r);
bool ipc_obj_freed(ump_pool_t *pool, struct slab *s, uint32_t idx);

/* import.c: ump_ipc_close of an open whose handle its caller never opens
 * again (the library's own: a shared pool's collectives get a fresh
 * handle per call), so the maker notes nothing to refuse: a long job's
 * closes add nothing there. */
int ipc_close_unnoted(ump_pool_t *pool, void *ptr);

/* server.c: started at the first export (0, or the listen's error). */
int ipc_server_start(ump_pool_t *pool);
/* Wakes the running thread to look at its sockets again (ump_pool_share
 * added one). */
void ipc_server_rescan(ump_pool_t *pool);
/* Stops the thread; the connections' opens are undone. */
void ipc_server_stop(ump_pool_t *pool);
/* In a child after fork: the descriptors are closed, nothing else. */
void ipc_server_drop_in_child(ump_pool_t *pool);

/* import.c: what the pool still has open is unmapped (in_child: only
 * forgotten, with the descriptors closed). */
void ipc_imports_drop(ump_pool_t *pool, bool in_child);

#endif
