/*
 * What travels between processes for IPC handles: the 64-byte handle and
 * the messages on a pool's socket. Both ends are processes of one user on
 * one node, running this same layout (the version says which); the bytes
 * are the host's order. A server never trusts a request, an opener never
 * trusts a reply: wire.c and the callers check every field.
 */
#ifndef UMP_IPC_WIRE_H
#define UMP_IPC_WIRE_H

#include <stdint.h>

#include "umpool.h"
#include "util/conf.h"
#include "util/unixsock.h"

#define IPC_VERSION 1
enum { IPC_BACKEND_SIM = 1, IPC_BACKEND_CUDA = 2 };

/* The handle's fields. */
struct ipc_handle_fields {
    uint8_t backend;  /* IPC_BACKEND_* of the maker */
    uint32_t pid;     /* the maker's process ... */
    uint64_t key;     /* ... and pool: its socket's name */
    uint64_t gen;     /* the export */
    uint64_t ticket;  /* this handle of it (one per ump_ipc_get_handle) */
    uint64_t addr;    /* the allocation's start in the maker */
    uint64_t size;    /* its size as requested */
};
void ipc_handle_pack(const struct ipc_handle_fields *f, ump_ipc_handle_t *h);
/* 0, or -EINVAL (logged, naming fn) when the bytes are not a handle: the
 * magic, the version or the check word (crc32c) is off. */
int ipc_handle_unpack(const ump_ipc_handle_t *h, struct ipc_handle_fields *f,
                      const char *fn);

/* Requests, opener to server. */
enum { IPC_OPEN = 1, IPC_CLOSE = 2, IPC_UNDO = 3 };
struct ipc_req {
    uint32_t op;
    uint32_t pad;
    uint64_t key, gen, ticket, addr;
};

/* The reply to OPEN: the export's chunks, in messages of at most
 * USOCK_MAX_FDS, each with one descriptor per chunk it lists. */
struct ipc_chunk_desc {
    uint64_t off;      /* from base */
    uint64_t size;
    uint64_t file_off; /* where the chunk starts in its file */
    int32_t device;
    uint32_t pad;
};
struct ipc_open_reply {
    int32_t status;    /* 0, or the error (then nothing else counts) */
    uint32_t total;    /* chunks in all messages */
    uint32_t first, count; /* this message's */
    uint64_t base;     /* the maker's address of the first chunk */
    uint64_t bytes;    /* from base to the end of the last */
    struct ipc_chunk_desc chunk[USOCK_MAX_FDS];
};

/* The reply to CLOSE and UNDO. */
struct ipc_status_reply {
    int32_t status;
    uint32_t pad;
};

/* A shared pool's socket (share.c): an attaching process sends ATTACH
 * once, then LEASE whenever it needs more addresses, and DETACH at its
 * pool's destroy (what it had open of others' memory is unmapped then);
 * a connection that ends without it is a death, or a drop. */
enum { SHARE_ATTACH = 1, SHARE_LEASE = 2, SHARE_DETACH = 3 };
/* Every key, each string key at its longest (as a checkpoint holds it). */
#define SHARE_CONFIG_MAX (6 * UMP_CONF_PATH_MAX + 4096)
struct share_req {
    uint32_t op;
    uint32_t pad;
    uint64_t granules;      /* LEASE: at least this many */
};
/* The reply to ATTACH, with the ledger's descriptor. */
struct share_welcome {
    int32_t status;         /* 0, or the error (nothing else counts) */
    uint32_t slot;          /* the attached process's in the ledger */
    uint64_t base, size;    /* the pool's reservation */
    uint64_t chunk_size;
    int32_t backend;        /* IPC_BACKEND_* */
    int32_t ndev;
    uint64_t device_mem[UMP_MAX_DEVICES]; /* what each device offers */
    uint64_t process_limit; /* the sharer's, 0: none */
    uint64_t ledger_bytes;
    uint64_t lease_start, lease_n; /* a first lease, in granules */
    char config[SHARE_CONFIG_MAX]; /* the sharer's (conf_format) */
};
/* The reply to LEASE. */
struct share_lease {
    int32_t status;
    uint32_t pad;
    uint64_t start, n;      /* granules */
};

#endif
