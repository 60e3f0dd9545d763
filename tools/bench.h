/* Scenarios of umpool-bench that live in their own files, and the small
 * helpers every scenario shares. */
#ifndef UMP_BENCH_H
#define UMP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Writes size in binary units: "256 B", "64 KiB", "1.5 GiB". */
static inline const char *fmt_size(size_t size, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    unsigned u = 0;
    size_t unit = 1;

    while (u + 1 < sizeof(units) / sizeof(units[0]) && size >= unit * 1024) {
        unit *= 1024;
        u++;
    }
    if (size % unit == 0)
        snprintf(buf, len, "%zu %s", size / unit, units[u]);
    else
        snprintf(buf, len, "%.2f %s", (double)size / (double)unit, units[u]);
    return buf;
}

static inline void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Sorts v in place; n > 0. */
static inline double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* umpool-bench placement [--json] [--topologies a,b] [--policies x,y]:
 * 0, or 1 on failure (messages printed). */
int bench_placement(const char *topologies, const char *policies, bool json);

/* umpool-bench offload: limits of its options, checked by the parser. */
#define BENCH_OFFLOAD_MIN_SIZE ((size_t)4 << 20)   /* and a multiple of 1M */
#define BENCH_OFFLOAD_MIN_BUDGET ((size_t)8 << 20)
#define BENCH_OFFLOAD_MAX_REPS 100

struct bench_offload_opts {
    const char *config; /* --config: appended to the scenario's keys */
    const char *dir;    /* --dir; NULL: $TMPDIR unless tmpfs, or /var/tmp */
    size_t size;        /* --size; 0: the default */
    size_t budget;      /* --budget; 0: size / 2 */
    int reps;           /* --reps; 0: the default */
    bool json;
};

/* umpool-bench offload: 0, or 1 on failure (messages printed). */
int bench_offload(const struct bench_offload_opts *o);

#endif
