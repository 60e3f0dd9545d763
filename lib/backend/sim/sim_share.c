/*
 * The sim backend's chunks shared between processes: chunk_export and
 * chunk_import (backend.h), over the device memfds of sim_vmm.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/sim/sim_vmm.h"
#include "util/log.h"

/*
 * A device chunk's memory is an extent of the device's memfd: exporting it
 * hands out that memfd (a new descriptor of it) and the extent's offset,
 * which the importer maps as it maps its own. The memfd holds all of the
 * device's memory in this context, as a CUDA process's devices hold every
 * allocation of its own: only a process of the same user gets it (the
 * pool's transport checks), and the pool uses only the extent. The memory
 * is not counted: the exporter must keep its chunk until every importer
 * has released its own (the pool's protocol does), since a release here
 * gives the extent back for reuse; on cuda the driver counts.
 */

int sim_chunk_export(void *ctx, ump_handle_t h, int *fd_p, uint64_t *off_p)
{
    struct sim_ctx *c = ctx;
    struct sim_chunk *ch;
    int err = sim_check_caller("chunk_export");

    if (err)
        return err;
    if (!fd_p || !off_p) {
        ump_log_error("sim: chunk_export: NULL result pointer");
        return -EINVAL;
    }
    pthread_mutex_lock(&c->lock);
    ch = chunk_of(c, h);
    if (!ch || ch->host) {
        ump_log_error("sim: chunk_export: handle %#llx is not a live device "
                      "chunk", (unsigned long long)h);
        err = -EINVAL;
    } else if (!(err = sim_dev_op(c, ch->device))) {
        int fd = fcntl(chunk_fd(c, ch), F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            err = -errno;
            ump_log_error("sim: chunk_export: %s", strerror(-err));
        } else {
            *fd_p = fd;
            *off_p = ch->off;
            ch->exported = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return err;
}

/* 0 when fd is device `device`'s memory of a sim context (its memfd's
 * name says so: another file, or another device's memory, is not
 * importable as this device's) holding [off, off + size). Logs. */
static int import_check(int fd, uint64_t off, size_t size, int device)
{
    char link[64], name[128], want[64];
    struct stat st;
    ssize_t len;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    len = readlink(link, name, sizeof(name) - 1);
    if (len < 0 || fstat(fd, &st) != 0) {
        ump_log_error("sim: chunk_import: descriptor %d: %s", fd,
                      strerror(errno));
        return -EINVAL;
    }
    name[len] = '\0';
    snprintf(want, sizeof(want), "/memfd:umpool-sim-dev%d ", device);
    if (strncmp(name, want, strlen(want)) != 0) {
        ump_log_error("sim: chunk_import: descriptor %d (%s) is not device "
                      "%d's memory", fd, name, device);
        return -EINVAL;
    }
    if (!size || size % SIM_GRAN || size / SIM_GRAN > UINT32_MAX ||
        off % SIM_GRAN ||
        off > (uint64_t)st.st_size || size > (uint64_t)st.st_size - off) {
        ump_log_error("sim: chunk_import: [%llu, +%zu) is not a "
                      "granularity-aligned extent of device %d's %lld bytes",
                      (unsigned long long)off, size, device,
                      (long long)st.st_size);
        return -EINVAL;
    }
    return 0;
}

int sim_chunk_import(void *ctx, int fd, uint64_t off, size_t size, int device,
                     ump_handle_t *h_p)
{
    struct sim_ctx *c = ctx;
    struct sim_chunk *ch;
    struct sim_call k;
    int err = sim_check_caller("chunk_import");

    if (err)
        return err;
    if (!h_p || device < 0 || device >= c->ndev) {
        ump_log_error("sim: chunk_import: %s", h_p ? "no such device"
                                                   : "NULL handle pointer");
        return -EINVAL;
    }
    /* Checked on a descriptor of its own: the caller's number could
     * name another file by the time it is used. */
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        err = -errno;
        ump_log_error("sim: chunk_import: descriptor %d: %s", fd,
                      strerror(-err));
        return err == -EBADF ? -EINVAL : err;
    }
    err = import_check(own, off, size, device);
    if (err) {
        close(own);
        return err;
    }
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_dev_op(c, device);
    if (!err && c->nimported >= SIM_IMPORTS) {
        ump_log_error("sim: chunk_import: %d imported chunks are live, the "
                      "most a context holds", SIM_IMPORTS);
        err = -ENOMEM;
    }
    ch = err ? NULL : slot_get(c);
    if (!err && !ch) {
        ump_log_error("sim: chunk table is full");
        err = -ENOMEM;
    }
    if (!err) {
        memset(ch, 0, sizeof(*ch));
        ch->device = device;
        ch->size = size;
        ch->off = off;
        ch->imported = true;
        ch->fd = own;
        c->nimported++;
        drv_account(c, ch, DRV_CREATE, &k);
        *h_p = (ump_handle_t)(uintptr_t)ch;
    }
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    if (err)
        close(own);
    return err;
}

