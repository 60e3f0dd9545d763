/*
 * A pool shared by the processes of a node (issue 32; umpool.h:
 * ump_pool_share, ump_pool_attach). The process that shares the pool (the
 * sharer) serves a named socket through its IPC server thread; a process
 * that attaches reserves the sharer's addresses at the same base, so that
 * a pointer is one number everywhere, and allocates in slices of them the
 * sharer leases it: no two processes hand out one address, and each keeps
 * its own allocator (no lock is shared between processes). Physical
 * memory stays the maker's; another process uses an allocation through
 * an IPC handle, mapped at the same address.
 *
 * The ledger is a memfd segment every process maps: a slot per process
 * with the device memory it holds (charged before each chunk is made,
 * against the devices' capacity), and the opens it holds of each other
 * slot's memory. Each slot's counters are written by that process only
 * (relaxed atomics, summed by readers), and cleared by the sharer only
 * once that process has ended or detached; its state and pid by the
 * sharer (copies: the sharer decides by its own records): a SIGKILL
 * anywhere leaves them consistent, and the sharer hands a dead process's
 * slot and leases back once no open of its memory is left.
 */
#ifndef UMP_IPC_SHARE_H
#define UMP_IPC_SHARE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/pool.h"
#include "util/unixsock.h"

/* Processes of one shared pool at most, the sharer's slot (0) included. */
#define SHARE_SLOTS 64
#define SHARE_MAGIC 0x52474c44504d55ull /* "UMPDLGR" */
#define SHARE_VERSION 1

enum { SLOT_FREE = 0, SLOT_LIVE = 1, SLOT_GONE = 2 };

struct share_slot {
    _Atomic uint32_t state;  /* SLOT_*: the sharer's to write */
    _Atomic uint32_t pid;    /* the sharer's to write */
    _Atomic uint64_t key;    /* the process's pool's IPC key: its own */
    _Atomic uint64_t used[UMP_MAX_DEVICES];  /* device bytes it holds */
    _Atomic uint32_t holds[SHARE_SLOTS];     /* its opens of slot k's */
};

struct share_ledger {
    uint64_t magic;
    uint32_t version, nslots;
    int32_t ndev;
    uint32_t pad;
    uint64_t process_limit;
    uint64_t capacity[UMP_MAX_DEVICES]; /* bytes each device offers */
    struct share_slot slot[SHARE_SLOTS];
};

/* Granules [start, start+n) of the reservation, leased to a slot. */
struct share_range {
    size_t start, n;
    int slot;
};

/* The sharer's own record of a slot, what it decides by: the ledger's
 * state and pid are copies for the others to read, and any process of the
 * pool could write there. */
struct share_slot_rec {
    uint32_t state;          /* SLOT_* */
    int pidfd;               /* the process's, -1 */
    bool detached;           /* it said so: its memory is unmapped */
    int pid;                 /* the process's (SO_PEERCRED), 0: none */
};

struct share_state {
    char name[65];
    bool sharer;
    bool stopping;               /* the pool is being destroyed (lock) */
    int slot;                    /* this process's */
    struct share_ledger *ledger;
    int ledger_fd;               /* the sharer's, sent at each attach */
    size_t lease_n;              /* granules a lease has at least */
    /* What each device offers, this process's own copy (charges are
     * checked against it, never against the shared segment's). */
    uint64_t capacity[UMP_MAX_DEVICES];
    /* In-place imports of other processes' memory (import.c), in
     * granules (pool->lock): no lease given here covers them. */
    struct share_range *inplace;
    size_t ninplace, capinplace;
    /* The sharer's: the leases it gave out (pool->lock), its socket
     * (the server thread polls it), its record of the slots and whether
     * slots of processes gone wait for their memory's last close (the
     * server thread's). */
    struct share_range *leases;
    size_t nleases, capleases;
    struct usock_listener listener;
    struct share_slot_rec slots[SHARE_SLOTS];
    bool waiting;
    /* Device bytes of this process's memory that other processes still
     * had open when its pool was destroyed (share_note_kept): they stay
     * mapped there, so they are charged again before the detach. */
    uint64_t kept[UMP_MAX_DEVICES];
    /* An attached process's: its connection to the sharer, the sharer's
     * process (watched while an answer is awaited) and the leases it was
     * given (pool->lock). */
    int fd, sharer_pidfd;
    struct share_range *own;
    size_t nown, capown;
};

struct ipc_conn;

/* The sharer's side, on its IPC server thread: a request of c (ATTACH,
 * LEASE; negative: drop c), c's end (its process detached or died), and
 * the slots of processes gone whose memory is no longer open anywhere
 * given back (true while some still wait). */
int share_serve(ump_pool_t *pool, struct ipc_conn *c);
void share_conn_gone(ump_pool_t *pool, struct ipc_conn *c);
bool share_reclaim(ump_pool_t *pool);
/* The process behind an attached connection (a pidfd to poll: it fires
 * when the process ends, even where a child it forked keeps the
 * connection open), or -1. */
int share_conn_pidfd(ump_pool_t *pool, const struct ipc_conn *c);

/* ump_pool_attach, made with the assembly's observer. */
struct pool_observer;
int share_attach(const char *name, const char *config,
                 const struct pool_observer *obs, ump_pool_t **pool_p);
/* At the pool's destroy, after the IPC server stopped: stops sharing (the
 * sharer's socket goes), no more leases; the ledger stays, so that the
 * destroy's releases are uncharged. Then share_fini, after them:
 * detaches, and the ledger goes. In a child after fork, the descriptors
 * only. */
void share_stop(ump_pool_t *pool);
/* At the destroy, the server's thread stopped, before it drops the
 * openers' connections (which frees what only they kept): notes in kept
 * the chunks of this process's exports that are open elsewhere. */
void share_note_kept(ump_pool_t *pool);
void share_fini(ump_pool_t *pool);
void share_stop_in_child(ump_pool_t *pool);

/* Is process pid there (kill 0)? One that ended but is not reaped yet,
 * or a pid reused since, reads as there: what waits on it waits longer,
 * the safe side. 0 or past INT32_MAX: no. */
bool share_pid_alive(uint32_t pid);

/* For imports: the ledger slot of the pool (pid, key) of this shared
 * pool, with one hold of it counted for this process (so that its
 * addresses are not leased again while mapped here), or -1; and the hold
 * given back. */
int share_hold(ump_pool_t *pool, uint32_t pid, uint64_t key);
void share_unhold(ump_pool_t *pool, int slot);
/* Claims [addr, addr+bytes), slot's memory, to be mapped in this pool's
 * own reservation at the same address: true when it may (inside the
 * reservation, in none of this process's leases, for the sharer in
 * slot's, and not mapped so by another import), and it is then recorded
 * until share_unclaim. */
bool share_claim(ump_pool_t *pool, int slot, uint64_t addr, size_t bytes);
void share_unclaim(ump_pool_t *pool, uint64_t addr, size_t bytes);

/* The name pool is shared under (as sharer or attached) into name, and
 * true; false ("") when it is not shared. */
bool share_name(ump_pool_t *pool, char *name, size_t len);

/* For the statistics segment (lib/publish): the shared pool's name into
 * name ("" when the pool is not shared) and its processes now, at most
 * cap, in slot order; *self_p: this process's row. The rows. */
struct share_proc {
    int32_t pid;
    uint32_t slot;
    uint64_t bytes;          /* device memory it holds, all devices */
};
int share_processes(ump_pool_t *pool, char *name, size_t len,
                    struct share_proc *out, int cap, int *self_p);

#endif
