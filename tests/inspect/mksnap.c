/*
 * mksnap: writes snapgen's snapshot to a file, whole or broken on purpose,
 * for the umpool-inspect script tests and the fuzz target's seed corpus.
 *
 *   mksnap FILE [--uid N] [--pid N] [--pid-start N] [--pool N]
 *               [--pid-ns N] [--ndev N] [--max-allocs N] [--map-cap N]
 *               [--break magic|version|truncate|grow|ndev|nalloc|map|frag]
 *   mksnap --size-max      the largest snapshot a reader accepts, in bytes
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "snapgen.h"
#include "publish/snapshot.h"

static int usage(void)
{
    fprintf(stderr, "usage: mksnap FILE [--uid N] [--pid N] [--pid-start N] "
            "[--pool N] [--pid-ns N] [--ndev N] [--max-allocs N] [--map-cap N] "
            "[--break magic|version|truncate|grow|ndev|nalloc|map|frag]\n"
            "       mksnap --size-max\n");
    return 2;
}

/* Damages the snapshot as asked; false for an unknown way. */
static bool damage(char *buf, size_t *len, const char *how)
{
    struct snap_header *h = (struct snap_header *)buf;
    struct snap_data *d = (struct snap_data *)(h + 1);
    struct snap_device *dev = (struct snap_device *)(buf + snap_off_dev());
    if (!strcmp(how, "magic"))
        memcpy(h->magic, "NOTSNAP", 8);
    else if (!strcmp(how, "version"))
        h->version = SNAP_VERSION + 1;
    else if (!strcmp(how, "truncate"))
        *len /= 2;
    else if (!strcmp(how, "grow"))
        *len += 8; /* the caller's buffer has room: see main */
    else if (!strcmp(how, "ndev"))
        h->ndev = SNAP_MAX_DEVICES + 1;
    else if (!strcmp(how, "nalloc"))
        d->nalloc = h->max_allocs + 1;
    else if (!strcmp(how, "map"))
        dev[1].map_count = h->map_cap + 1;
    else if (!strcmp(how, "frag"))
        dev[2].fragmentation = 2.5;
    else
        return false;
    return true;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--size-max")) {
        printf("%zu\n", snap_size_max());
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-')
        return usage();
    struct snapgen_opts o = {(uint32_t)geteuid(), 4242, 0, 3, 0, 0, 0, 0};
    const char *how = NULL;
    for (int i = 2; i < argc; i++) {
        if (i + 1 == argc)
            return usage();
        const char *k = argv[i], *v = argv[++i];
        unsigned long long n = strtoull(v, NULL, 10);
        if (!strcmp(k, "--uid"))
            o.uid = (uint32_t)n;
        else if (!strcmp(k, "--pid"))
            o.pid = (int32_t)n;
        else if (!strcmp(k, "--pid-start"))
            o.pid_start = n;
        else if (!strcmp(k, "--pool"))
            o.pool_id = n;
        else if (!strcmp(k, "--pid-ns"))
            o.pid_ns = (uint32_t)n;
        else if (!strcmp(k, "--ndev") && n >= 1 && n <= SNAP_MAX_DEVICES)
            o.ndev = (uint32_t)n;
        else if (!strcmp(k, "--max-allocs") && n >= 1 && n <= SNAP_MAX_ALLOCS)
            o.max_allocs = (uint32_t)n;
        else if (!strcmp(k, "--map-cap") && n >= 1 && n <= SNAP_MAX_MAP)
            o.map_cap = (uint32_t)n;
        else if (!strcmp(k, "--break"))
            how = v;
        else
            return usage();
    }
    size_t len;
    char *snap = snapgen_build(&o, &len);
    char *buf = snap ? calloc(1, len + 8) : NULL;
    if (!buf) {
        fprintf(stderr, "mksnap: out of memory\n");
        return 1;
    }
    memcpy(buf, snap, len);
    free(snap);
    if (how && !damage(buf, &len, how)) {
        free(buf);
        return usage();
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len || close(fd)) {
        perror(argv[1]);
        free(buf);
        return 1;
    }
    free(buf);
    return 0;
}
