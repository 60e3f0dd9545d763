/*
 * The sim backend's address reservations (reserve, reserve_at,
 * unreserve): PROT_NONE address space, placed first in the window of
 * backend/va_window.c so that another process finds the range free, with
 * each reservation's granule table. Split from sim_vmm.c, which
 * maps chunks into them.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/sim/sim_vmm.h"
#include "backend/va_window.h"
#include "topo/drivercost.h"
#include "util/internal.h"
#include "util/log.h"
/* --- reservations ------------------------------------------------------ */

/* Puts fresh PROT_NONE memory over [va, va + size) of a reservation. */
int sim_resv_fill(void *va, size_t size)
{
    void *p = mmap(va, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);

    return p == MAP_FAILED ? -errno : 0;
}

/* Linux 4.17; an older kernel takes it for a hint (place_at checks). */
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Candidates of the window tried before the kernel chooses. */
#define SIM_VA_TRIES 64

/* reserve: size bytes of PROT_NONE address space anywhere, aligned to al
 * (over-reserved by the alignment, then trimmed at both ends). NULL, logged,
 * when the address space is exhausted. */
static char *place_anywhere(size_t size, size_t al)
{
    char *raw, *va;
    size_t head;

    /* First in the window (backend/va_window.c says why), each candidate
     * mapped with its guards, so that they are known free, then trimmed
     * to the range. */
    struct va_window w;
    uintptr_t at;
    va_window_start(&w, size, al, SIM_VA_TRIES);
    while (va_window_next(&w, &at)) {
        raw = mmap((void *)at, w.span, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE,
                   -1, 0);
        if (raw == (char *)at) {
            munmap(raw, w.guard);
            munmap(raw + w.guard + size, w.span - w.guard - size);
            return raw + w.guard;
        }
        if (raw != MAP_FAILED) /* an old kernel took it for a hint */
            munmap(raw, w.span);
        if (raw != MAP_FAILED || errno != EEXIST)
            break;
    }
    raw = mmap(NULL, size + al, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        ump_log_error("sim: cannot reserve %zu bytes of address space: %s",
                      size, strerror(errno));
        return NULL;
    }
    va = (char *)UMP_ALIGN_UP((uintptr_t)raw, (uintptr_t)al);
    head = (size_t)(va - raw);
    if (head)
        munmap(raw, head);
    if (al - head)
        munmap(va + size, al - head);
    return va;
}

/* reserve_at: PROT_NONE address space exactly over [va, va + size), never
 * over a mapping of the process (MAP_FIXED_NOREPLACE): -EADDRINUSE when one
 * is there, a negative errno for any other refusal; logged. */
static int place_at(char *va, size_t size)
{
    char *p = mmap(va, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE,
                   -1, 0);

    if (p == MAP_FAILED) {
        int err = errno;

        if (err == EEXIST) {
            ump_log_error("sim: reserve_at: [%p, +%zu) is taken by a "
                          "mapping of the process", (void *)va, size);
            return -EADDRINUSE;
        }
        ump_log_error("sim: reserve_at: cannot reserve [%p, +%zu): %s",
                      (void *)va, size, strerror(err));
        return -err;
    }
    if (p != va) {
        /* A kernel without MAP_FIXED_NOREPLACE took va for a hint. */
        munmap(p, size);
        ump_log_error("sim: reserve_at: [%p, +%zu) is taken by a mapping "
                      "of the process (the kernel offered %p)", (void *)va,
                      size, (void *)p);
        return -EADDRINUSE;
    }
    return 0;
}

/* reserve (fixed false: anywhere) and reserve_at (fixed: exactly at): the
 * checks, the placement, the reservation's record and its granule table.
 * The range is placed before the table is mapped, so that the table cannot
 * land where reserve_at was asked to go. */
static int reserve_range(struct sim_ctx *c, const char *op, bool fixed,
                         char *at, size_t size, size_t align, void **va_p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), al;
    struct sim_resv *r;
    struct sim_call k;
    char *va;
    int err;

    err = sim_check_caller(op);
    if (err)
        return err;
    sim_call_begin(c, &k);
    pthread_mutex_lock(&c->lock);
    err = sim_fault_hit(c, FAULT_RESERVE);
    if (err)
        goto out;
    err = -EINVAL;
    if (!size || size % SIM_GRAN) {
        ump_log_error("sim: %s: size %zu is not a positive multiple of "
                      "the granularity %zu", op, size, SIM_GRAN);
        goto out;
    }
    if (align && !ump_is_pow2(align)) {
        ump_log_error("sim: %s: alignment %zu is not a power of two", op,
                      align);
        goto out;
    }
    al = align > SIM_GRAN ? align : SIM_GRAN;
    if (size > SIZE_MAX - al) {
        ump_log_error("sim: %s: size %zu is too large", op, size);
        goto out;
    }
    if (fixed) {
        uintptr_t a = (uintptr_t)at;

        if (!a || a % al || a > UINTPTR_MAX - size) {
            ump_log_error("sim: %s: [%p, +%zu) is not a range of addresses "
                          "aligned to %zu", op, (void *)at, size, al);
            goto out;
        }
        for (r = c->resv; r; r = r->next) {
            uintptr_t b = (uintptr_t)r->va;

            if (a < b + r->size && b < a + size) {
                ump_log_error("sim: %s: [%p, +%zu) is taken by reservation "
                              "[%p, +%zu)", op, (void *)at, size,
                              (void *)r->va, r->size);
                err = -EADDRINUSE;
                goto out;
            }
        }
    }
    err = -ENOMEM;
    r = calloc(1, sizeof(*r));
    if (!r) {
        ump_log_error("sim: out of host memory");
        goto out;
    }
    if (fixed) {
        err = place_at(at, size);
        if (err)
            goto err_free;
        va = at;
    } else {
        va = place_anywhere(size, al);
        if (!va)
            goto err_free;
    }
    r->gbytes = UMP_ALIGN_UP(size / SIM_GRAN * sizeof(*r->g), page);
    r->g = mmap(NULL, r->gbytes, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r->g == MAP_FAILED) {
        ump_log_error("sim: %s: cannot map the granule table: %s", op,
                      strerror(errno));
        err = -ENOMEM;
        goto err_range;
    }

    r->va = va;
    r->size = size;
    r->next = c->resv;
    c->resv = r;
    *va_p = va;
    /* Any size (1 TiB measured), and not a device's memory: no driver_ns. */
    k.ns = drvcost_h200.reserve_ns;
    err = 0;
    goto out;

err_range:
    munmap(va, size);
err_free:
    free(r);
out:
    pthread_mutex_unlock(&c->lock);
    sim_call_end(c, &k);
    return err;
}

int sim_reserve(void *ctx, size_t size, size_t align, void **va_p)
{
    return reserve_range(ctx, "reserve", false, NULL, size, align, va_p);
}

int sim_reserve_at(void *ctx, void *va, size_t size, size_t align)
{
    void *got;

    return reserve_range(ctx, "reserve_at", true, va, size, align, &got);
}

int sim_unreserve(void *ctx, void *va, size_t size)
{
    struct sim_ctx *c = ctx;
    struct sim_resv **pp, *r;
    int err;

    err = sim_check_caller("unreserve");
    if (err)
        return err;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->resv; (r = *pp); pp = &r->next)
        if (r->va == va)
            break;
    if (!r || r->size != size) {
        ump_log_error("sim: unreserve: [%p, +%zu) is not a reservation", va,
                      size);
        err = -EINVAL;
        goto out;
    }
    if (r->nmapped) {
        ump_log_error("sim: unreserve: %zu granules are still mapped in %p",
                      r->nmapped, va);
        err = -EBUSY;
        goto out;
    }
    *pp = r->next;
    munmap(r->va, r->size);
    munmap(r->g, r->gbytes);
    free(r);
out:
    pthread_mutex_unlock(&c->lock);
    return err;
}

