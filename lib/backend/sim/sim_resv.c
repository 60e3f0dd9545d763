/*
 * The sim backend's address reservations (reserve, reserve_at,
 * unreserve): PROT_NONE address space, placed first in a window of its
 * own so that a checkpoint restored in a fresh process finds its range
 * free, with each reservation's granule table. Split from sim_vmm.c, which
 * maps chunks into them.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "backend/sim/sim_vmm.h"
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

/* ThreadSanitizer's shadow lies at 32 TiB, and its mmap aborts the
 * process on a fixed address outside the application's ranges: under it
 * the window is the top 128 GiB of its "mid" application range (x86-64,
 * 48-bit: 0x5500... to 0x5680...), above where the kernel puts a PIE
 * program and its heap (0x5555... plus at most 1 TiB of randomization
 * with the default 28 bits), so that the processes of a shared pool find
 * the pool's range free in each other. */
#if defined(__SANITIZE_THREAD__)
#define SIM_VA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIM_VA_TSAN 1
#endif
#endif
/* Where reservations go first (place_anywhere): slots of a window, the
 * first drawn at random among SIM_VA_SLOTS, SIM_VA_TRIES tried before the
 * kernel chooses; 32 TiB to 64 TiB for the first slots, one TiB apart. */
#ifdef SIM_VA_TSAN
#define SIM_VA_WINDOW ((uintptr_t)0x566000000000)
#define SIM_VA_WINDOW_END ((uintptr_t)0x568000000000) /* 128 GiB */
#define SIM_VA_SLOT ((uintptr_t)1 << 32)
#else
#define SIM_VA_WINDOW ((uintptr_t)32 << 40)
#define SIM_VA_WINDOW_END UINTPTR_MAX
#define SIM_VA_SLOT ((uintptr_t)1 << 40)
#endif
#define SIM_VA_SLOTS 32
#define SIM_VA_TRIES 64
#define SIM_VA_GUARD ((uintptr_t)1 << 30)


/* reserve: size bytes of PROT_NONE address space anywhere, aligned to al
 * (over-reserved by the alignment, then trimmed at both ends). NULL, logged,
 * when the address space is exhausted. */
static char *place_anywhere(size_t size, size_t al)
{
    char *raw, *va;
    size_t head;

    /* First in a window of its own, the same in every process: a
     * checkpoint restored in a fresh process (ump_pool_restore) needs its
     * old range free there, and the kernel puts a new process's libraries,
     * heap and stacks elsewhere (near the program and under the top of the
     * address space, moved by ASLR from run to run), so a range chosen by
     * the kernel in one run is often taken in the next. The window starts
     * at 32 TiB, above ASan's shadow (TSan's: above); where it is not the
     * process's to use (another sanitizer's shadow, a smaller address
     * space) the mmap fails and the kernel chooses, as before. */
    /* A guard of free addresses on each side, so that reservations never
     * touch: an overrun faults instead of landing in another pool. */
    uintptr_t guard = UMP_ALIGN_UP(SIM_VA_GUARD, al);
    uintptr_t span = UMP_ALIGN_UP(size, al) + 2 * guard;
    /* The first slot is drawn at random from SIM_VA_SLOTS, so that a
     * process that has a pool already seldom holds the range a checkpoint
     * of another process needs; a fresh process has the whole window. */
    uintptr_t first = 0;
    if (getrandom(&first, sizeof(first), GRND_NONBLOCK) != sizeof(first))
        first = (uintptr_t)getpid() * 2654435761u;
    first = (first % SIM_VA_SLOTS) * SIM_VA_SLOT;
    /* Past the window's end (or the address space's): once more from
     * its start. */
    bool wrapped = false;
    for (uintptr_t at = UMP_ALIGN_UP(SIM_VA_WINDOW + first, al), i = 0;
         i < SIM_VA_TRIES; i++, at += span) {
        if (at + span < at || at + span > SIM_VA_WINDOW_END) {
            if (wrapped)
                break;
            wrapped = true;
            at = UMP_ALIGN_UP(SIM_VA_WINDOW, al);
            if (at + span < at || at + span > SIM_VA_WINDOW_END)
                break;
        }
        raw = mmap((void *)at, span, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE,
                   -1, 0);
        if (raw == (char *)at) {
            munmap(raw, guard);
            munmap(raw + guard + size, span - guard - size);
            return raw + guard;
        }
        if (raw != MAP_FAILED) /* an old kernel took it for a hint */
            munmap(raw, span);
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

