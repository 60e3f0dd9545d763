#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "util/internal.h"
#include "mem/vas.h"

int vas_init(struct vas *v, void *base, size_t size, size_t granule)
{
    if (!ump_is_pow2(granule) || size % granule || !size)
        return -EINVAL;
    memset(v, 0, sizeof(*v));
    v->base = (uintptr_t)base;
    v->size = size;
    v->shift = (unsigned)__builtin_ctzll(granule);
    v->ngran = size >> v->shift;
    /* A terabyte of addresses is half a million granules: map the table
     * without reserving memory, so only the touched part costs pages. */
    size_t bytes = v->ngran * sizeof(*v->gran);
    void *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED) {
        ump_log_error("cannot map the granule table (%zu bytes): %s", bytes,
                      strerror(errno));
        return -ENOMEM;
    }
    v->gran = t;
    v->capfree = 16;
    v->free = malloc(v->capfree * sizeof(*v->free));
    if (!v->free) {
        munmap(t, bytes);
        return -ENOMEM;
    }
    v->free[0] = (struct vas_range){0, v->ngran};
    v->nfree = 1;
    return 0;
}

void vas_fini(struct vas *v)
{
    if (v->gran)
        munmap(v->gran, v->ngran * sizeof(*v->gran));
    free(v->free);
    memset(v, 0, sizeof(*v));
}

/* Takes the first n granules of free range i (which has them). */
static void take_from(struct vas *v, size_t i, size_t n)
{
    struct vas_range *r = &v->free[i];
    r->start += n;
    r->n -= n;
    if (!r->n) {
        memmove(r, r + 1, (v->nfree - i - 1) * sizeof(*r));
        v->nfree--;
    }
}

int vas_take(struct vas *v, size_t n, size_t *start_p)
{
    for (size_t i = 0; i < v->nfree; i++) {
        if (v->free[i].n < n)
            continue;
        *start_p = v->free[i].start;
        take_from(v, i, n);
        return 0;
    }
    return -ENOMEM;
}

/* The index of the first free range starting at or after start. */
static size_t range_from(const struct vas *v, size_t start)
{
    size_t lo = 0, hi = v->nfree;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->free[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t vas_free_at(const struct vas *v, size_t start)
{
    size_t i = range_from(v, start);
    return i < v->nfree && v->free[i].start == start ? v->free[i].n : 0;
}

int vas_take_at(struct vas *v, size_t start, size_t n)
{
    size_t i = range_from(v, start);
    if (i == v->nfree || v->free[i].start != start || v->free[i].n < n)
        return -ENOMEM;
    take_from(v, i, n);
    return 0;
}

/* Room in the table of free ranges for one more. */
static int free_room(struct vas *v)
{
    if (v->nfree < v->capfree)
        return 0;
    size_t cap = v->capfree * 2;
    struct vas_range *f = realloc(v->free, cap * sizeof(*f));
    if (!f)
        return -ENOMEM;
    v->free = f;
    v->capfree = cap;
    return 0;
}

int vas_take_range(struct vas *v, size_t start, size_t n)
{
    if (!n || start >= v->ngran || n > v->ngran - start)
        return -EADDRINUSE;
    size_t i = range_from(v, start + 1); /* the range holding start, if any */
    if (i == 0 || v->free[i - 1].start + v->free[i - 1].n < start + n)
        return -EADDRINUSE;
    struct vas_range *r = &v->free[i - 1];
    size_t head = start - r->start, tail = r->start + r->n - start - n;
    if (!head) { /* the front of the range: no split */
        take_from(v, i - 1, n);
        return 0;
    }
    if (tail) { /* the middle: the range splits in two */
        if (free_room(v))
            return -ENOMEM;
        r = &v->free[i - 1];
        memmove(&v->free[i + 1], &v->free[i],
                (v->nfree - i) * sizeof(*v->free));
        v->free[i] = (struct vas_range){start + n, tail};
        v->nfree++;
    }
    r->n = head;
    return 0;
}

int vas_give(struct vas *v, size_t start, size_t n)
{
    size_t i = range_from(v, start); /* the first range after the given one */
    bool join_prev = i > 0 && v->free[i - 1].start + v->free[i - 1].n == start;
    bool join_next = i < v->nfree && start + n == v->free[i].start;
    UMP_ASSERT(!(i > 0 && v->free[i - 1].start + v->free[i - 1].n > start));
    UMP_ASSERT(!(i < v->nfree && start + n > v->free[i].start));
    if (join_prev && join_next) {
        v->free[i - 1].n += n + v->free[i].n;
        memmove(&v->free[i], &v->free[i + 1],
                (v->nfree - i - 1) * sizeof(*v->free));
        v->nfree--;
    } else if (join_prev) {
        v->free[i - 1].n += n;
    } else if (join_next) {
        v->free[i].start = start;
        v->free[i].n += n;
    } else {
        if (free_room(v))
            return -ENOMEM;
        memmove(&v->free[i + 1], &v->free[i],
                (v->nfree - i) * sizeof(*v->free));
        v->free[i] = (struct vas_range){start, n};
        v->nfree++;
    }
    return 0;
}

size_t vas_largest_free(const struct vas *v)
{
    size_t best = 0;
    for (size_t i = 0; i < v->nfree; i++)
        if (v->free[i].n > best)
            best = v->free[i].n;
    return best;
}

void vas_set(struct vas *v, size_t start, size_t n, int kind, void *owner)
{
    uintptr_t tag = (uintptr_t)owner | (uintptr_t)kind;
    for (size_t g = start; g < start + n; g++)
        atomic_store_explicit(&v->gran[g].tag, tag, memory_order_release);
}
