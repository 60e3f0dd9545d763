/* The helpers of the scenarios that run a peer process (peer.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "peer.h"

int peer_read(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

int peer_write(int fd, const void *buf, size_t n)
{
    return write(fd, buf, n) == (ssize_t)n ? 0 : -1;
}

pid_t peer_spawn(const char *const *args, int *to_p, int *from_p)
{
    int to[2], from[2];
    if (pipe(to)) {
        perror("umpool-bench: pipe");
        return -1;
    }
    if (pipe(from)) {
        perror("umpool-bench: pipe");
        close(to[0]);
        close(to[1]);
        return -1;
    }
    char in[16], out[16];
    snprintf(in, sizeof(in), "%d", to[0]);
    snprintf(out, sizeof(out), "%d", from[1]);
    size_t n = 0;
    while (args[n])
        n++;
    const char **argv = calloc(n + 4, sizeof(*argv));
    if (argv) {
        argv[0] = "umpool-bench";
        for (size_t i = 0; i < n; i++)
            argv[i + 1] = args[i];
        argv[n + 1] = in;
        argv[n + 2] = out;
    }
    pid_t pid = argv ? fork() : -1;
    if (pid < 0) {
        perror("umpool-bench: fork");
        free(argv);
        for (int i = 0; i < 2; i++) {
            close(to[i]);
            close(from[i]);
        }
        return -1;
    }
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        execv("/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    free(argv);
    close(to[0]);
    close(from[1]);
    *to_p = to[1];
    *from_p = from[0];
    return pid;
}

int peer_finish(pid_t pid, int to, int from, int fail, const char *who)
{
    int status = 0;
    if (to >= 0)
        close(to);
    waitpid(pid, &status, 0);
    close(from);
    if (!fail && (!WIFEXITED(status) || WEXITSTATUS(status))) {
        fprintf(stderr, "umpool-bench %s: the peer ended badly\n", who);
        fail = 1;
    }
    return fail;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double peer_median_us(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    return (double)v[n / 2] / 1e3;
}

int peer_copy(ump_pool_t *pool, void *dst, const void *src, size_t size,
              ump_stream_t s, uint64_t *t_p)
{
    uint64_t t0 = now_ns();
    int rc = ump_memcpy_async(pool, dst, src, size, s);
    if (!rc)
        rc = ump_stream_synchronize(pool, s);
    *t_p = now_ns() - t0;
    return rc;
}
