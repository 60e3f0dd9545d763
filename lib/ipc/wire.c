/*
 * The 64-byte handle: fixed offsets, a check word over the rest, so that
 * a damaged or truncated copy is told apart from a handle (wire.h).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "ipc/wire.h"
#include "util/crc32c.h"
#include "util/log.h"

/* Byte offsets in the handle. */
enum {
    OFF_MAGIC = 0,    /* 4: UMP_IPC_HANDLE_TAG */
    OFF_VERSION = 4,  /* 2 */
    OFF_BACKEND = 6,  /* 1, then 1 zero */
    OFF_PID = 8,      /* 4, then 4 zero */
    OFF_KEY = 16,
    OFF_GEN = 24,
    OFF_TICKET = 32,
    OFF_ADDR = 40,
    OFF_SIZE = 48,    /* 8, then 4 zero */
    OFF_CHECK = 60,   /* crc32c of bytes [0, 60) */
};
_Static_assert(sizeof(ump_ipc_handle_t) == 64, "the handle is 64 bytes");

/* The fields, where each lies in the handle and in the struct. */
static const struct field {
    int off;
    size_t len, at;
} fields[] = {
    {OFF_BACKEND, 1, offsetof(struct ipc_handle_fields, backend)},
    {OFF_PID, 4, offsetof(struct ipc_handle_fields, pid)},
    {OFF_KEY, 8, offsetof(struct ipc_handle_fields, key)},
    {OFF_GEN, 8, offsetof(struct ipc_handle_fields, gen)},
    {OFF_TICKET, 8, offsetof(struct ipc_handle_fields, ticket)},
    {OFF_ADDR, 8, offsetof(struct ipc_handle_fields, addr)},
    {OFF_SIZE, 8, offsetof(struct ipc_handle_fields, size)},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

void ipc_handle_pack(const struct ipc_handle_fields *f, ump_ipc_handle_t *h)
{
    uint16_t version = IPC_VERSION;
    memset(h, 0, sizeof(*h));
    memcpy(h->bytes + OFF_MAGIC, UMP_IPC_HANDLE_TAG, 4);
    memcpy(h->bytes + OFF_VERSION, &version, 2);
    for (size_t i = 0; i < NFIELDS; i++)
        memcpy(h->bytes + fields[i].off, (const char *)f + fields[i].at,
               fields[i].len);
    uint32_t check = crc32c(0, h->bytes, OFF_CHECK);
    memcpy(h->bytes + OFF_CHECK, &check, 4);
}

int ipc_handle_unpack(const ump_ipc_handle_t *h, struct ipc_handle_fields *f,
                      const char *fn)
{
    uint32_t check;
    uint16_t version;
    memcpy(&version, h->bytes + OFF_VERSION, 2);
    memcpy(&check, h->bytes + OFF_CHECK, 4);
    if (memcmp(h->bytes + OFF_MAGIC, UMP_IPC_HANDLE_TAG, 4) ||
        check != crc32c(0, h->bytes, OFF_CHECK)) {
        ump_log_error("%s: the handle is damaged (not the 64 bytes "
                      "ump_ipc_get_handle gave)", fn);
        return -EINVAL;
    }
    if (version != IPC_VERSION) {
        ump_log_error("%s: the handle is of format %u, this library reads "
                      "%u", fn, version, IPC_VERSION);
        return -EINVAL;
    }
    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < NFIELDS; i++)
        memcpy((char *)f + fields[i].at, h->bytes + fields[i].off,
               fields[i].len);
    return 0;
}
