/*
 * Configuration: one table of {key, default, type, doc} (UCX style). The
 * environment variable UMPOOL_CONF gives defaults, the string passed to
 * ump_pool_create overrides them key by key. Both are "key:value,key:value".
 */
#ifndef UMP_CONF_H
#define UMP_CONF_H

#include <stdbool.h>
#include <stddef.h>

enum ump_backend_kind {
    UMP_BACKEND_AUTO,
    UMP_BACKEND_SIM,
    UMP_BACKEND_CUDA,
};

enum ump_nvme_engine {
    UMP_NVME_AUTO,
    UMP_NVME_IO_URING,
    UMP_NVME_THREADS,
};

/* What the sim backend accounts as driver time (sim_driver_costs). */
enum ump_sim_driver_costs {
    UMP_SIM_COSTS_OFF,  /* nothing: driver_ns stays 0 on sim */
    UMP_SIM_COSTS_H200, /* the H200's per-handle costs (topo/drivercost.h) */
    /* the same, and every call waits for its H200 cost (host handles,
     * copies and syncs too): sim_vmm.c, sim_stream.c */
    UMP_SIM_COSTS_H200_TIMED,
};

/* Where an allocation goes that fits on no device (overflow). */
enum ump_overflow {
    UMP_OVERFLOW_NONE, /* fails with -ENOMEM, as the driver would */
    UMP_OVERFLOW_HOST, /* pinned host memory at pool addresses */
};

#define UMP_CONF_PATH_MAX 4096

struct ump_config {
    int backend;                         /* enum ump_backend_kind */
    int sim_devices;                     /* 0: not set */
    char sim_topology[UMP_CONF_PATH_MAX]; /* "": not set */
    size_t sim_device_mem;               /* 0: not set */
    int sim_driver_costs;                /* enum ump_sim_driver_costs */
    int sim_time_scale;                  /* h200-timed waits this many x */
    int sim_fail_device;                 /* -1: none (sim_fail.c) */
    int sim_fail_after;                  /* its operations before it fails */
    size_t device_mem;                   /* cap per device, 0: none */
    size_t process_limit;                /* per device and process, 0: none */
    char share[UMP_CONF_PATH_MAX];       /* join or share this pool, "": no */
    char attach[UMP_CONF_PATH_MAX];      /* join this pool, "": no */
    int cuda_virtual_devices;            /* pool devices per GPU (cuda) */
    int log_level;                       /* enum ump_log_level */
    char policy[UMP_CONF_PATH_MAX];      /* default placement policy */
    size_t chunk_size;                   /* bytes of one physical chunk */
    size_t max_chunk;                    /* largest chunk, cold device */
    size_t warm_chunk;                   /* largest chunk, freed memory held */
    bool carve;                          /* plain runs may share chunks */
    size_t release_threshold;            /* cached beyond recent peaks */
    int release_window;                  /* seconds that peaks stay recent */
    size_t va_size;                      /* 0: sized from the devices */
    bool tcache;                         /* per-thread caches on/off */
    size_t host_limit;                   /* host tier bytes, 0: RAM / 4 */
    size_t host_reserve;                 /* pinned host chunks made ahead */
    bool host_cpu_access;                /* the CPU reaches the host tier at
                                            the allocations' addresses */
    size_t pinned_limit;                 /* host places' bytes, 0: RAM / 4 */
    int overflow;                        /* enum ump_overflow */
    char nvme_dir[UMP_CONF_PATH_MAX];    /* ':'-separated list, "": none */
    size_t nvme_limit;                   /* NVMe tier bytes, 0: the disk */
    int nvme_queue_depth;                /* I/Os in flight per directory */
    int nvme_engine;                     /* enum ump_nvme_engine */
    int high_watermark, low_watermark;   /* percent of device capacity */
    bool publish;                        /* shared-memory statistics */
};

/* LIST: a STRING of ':'-separated items; a key given again in the same
 * string appends to it (nvme_dir:/a,nvme_dir:/b), another string replaces. */
enum ump_conf_type { UMP_CONF_ENUM, UMP_CONF_INT, UMP_CONF_SIZE,
                     UMP_CONF_STRING, UMP_CONF_BOOL, UMP_CONF_LIST };

struct ump_conf_entry {
    const char *key;
    const char *dflt;      /* default, in the string form a user writes */
    enum ump_conf_type type;
    const char *accepted;  /* for enums: "a|b|c"; else a short description */
    const char *doc;
    size_t offset;         /* into struct ump_config */
    long long min, max;    /* for ints and sizes; max 0: no maximum */
};

/* The table, terminated by an entry with key NULL (for README and tools). */
extern const struct ump_conf_entry conf_table[];

/* Fills cfg from the defaults, then UMPOOL_CONF, then arg (may be NULL).
 * -EINVAL with one log line naming the key, the value and what is accepted. */
int conf_load(const char *arg, struct ump_config *cfg);
/* conf_load over base, a configuration saved by conf_format (a
 * checkpoint's, named base_origin in messages): defaults, base,
 * UMPOOL_CONF, arg. */
int conf_load_over(const char *base, const char *base_origin,
                   const char *arg, struct ump_config *cfg);
/* Applies one "key:value,..." string on top of cfg; origin names it in
 * messages ("UMPOOL_CONF" or "config"). cfg is unchanged on error. */
int conf_apply(struct ump_config *cfg, const char *str, const char *origin);
void conf_defaults(struct ump_config *cfg);
/* Writes cfg as one "key:value,..." string that conf_apply reads back to
 * the same cfg (every key; a string key only when it is set). -ENOSPC when
 * it does not fit in len bytes. */
int conf_format(const struct ump_config *cfg, char *buf, size_t len);
/* Parses "123", "4K", "2M", "1G", "1T" (binary units). -EINVAL if bad. */
int conf_parse_size(const char *s, size_t *size_p);
/* The host tier's size in bytes, as the host_limit key documents it: the
 * configured value, else a quarter of physical memory. Each reader rounds it
 * to its own granule; the configuration keeps what the user wrote. */
size_t conf_host_limit(const struct ump_config *cfg);
/* The same for pinned_limit: the pinned host memory that ump_host_alloc
 * and overflow:host hold together. */
size_t conf_pinned_limit(const struct ump_config *cfg);

#endif
