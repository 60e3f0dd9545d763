/* A pool shared by processes (lib/ipc/share*.c; umpool.h ump_pool_share,
 * ump_pool_attach): this program shares a pool and runs itself again as
 * the processes that attach ("child MODE ..."). One pointer in up to eight
 * processes, configurations that disagree, the ledger's limits, a detach
 * whose export stays open, a stale socket, and processes killed at random
 * points 200 times. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdcount.h"
#include "rundir.h"
#include "ipc/share.h"
#include "ipc/wire.h"
#include "umpool.h"

#define MiB ((size_t)1 << 20)
#define CONF "backend:sim,sim_devices:1,sim_device_mem:64M,publish:false"

static ump_pool_t *share_pool(const char *conf, const char *name)
{
    ump_pool_t *p = NULL;
    assert_int_equal(ump_pool_create(conf, &p), 0);
    assert_int_equal(ump_pool_share(p, name), 0);
    return p;
}

static ump_stats_t stats(ump_pool_t *pool)
{
    ump_stats_t st;
    assert_int_equal(ump_stats(pool, UMP_DEVICE_ALL, &st), 0);
    return st;
}

static void nap_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* Waits (5 s at most) until the pool has procs processes. */
static int wait_procs(ump_pool_t *pool, int procs)
{
    for (int i = 0; i < 1000 && stats(pool).share_processes != procs; i++)
        nap_ms(5);
    return stats(pool).share_processes;
}

/* Leases the sharer has given out now. */
static size_t leases(ump_pool_t *pool)
{
    pthread_mutex_lock(&pool->lock);
    size_t n = pool->share ? pool->share->nleases : 0;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

static void hex(const ump_ipc_handle_t *h, char *out)
{
    for (int i = 0; i < 64; i++)
        sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

static int unhex(const char *s, ump_ipc_handle_t *h)
{
    for (int i = 0; i < 64; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        h->bytes[i] = (unsigned char)v;
    }
    return 0;
}

static size_t wrong(const void *p, size_t n, unsigned char v)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i += 4093)
        bad += ((const unsigned char *)p)[i] != v;
    return bad + (((const unsigned char *)p)[n - 1] != v);
}

/* ---- the other processes: this program again ---- */

/* What process ID of the ring allocates: 8 MiB (a run), or for even IDs
 * of the children a small allocation (a slab object, which an opener maps
 * with its slab's granule). */
static size_t ring_size(int id)
{
    return id % 2 == 0 && id < 100 ? 4096 + 64 * (size_t)id : 8 * MiB;
}

/* ring NAME ID: attaches, allocates ring_size(ID) of byte ID, says "PTR
 * HANDLE ID"; reads its neighbour's line, opens its handle (at the same
 * address: else 10), checks its bytes, says "done"; at "exit" frees and
 * detaches. */
static int child_ring(const char *name, int id)
{
    ump_pool_t *pool;
    void *p, *q;
    ump_ipc_handle_t h;
    char hx[129], line[256];
    unsigned long long at;
    int byte;
    if (ump_pool_attach(name, NULL, &pool) ||
        ump_alloc(pool, ring_size(id), NULL, &p))
        return 3;
    memset(p, id, ring_size(id));
    if (ump_ipc_get_handle(pool, p, &h))
        return 4;
    hex(&h, hx);
    printf("%llx %s %d\n", (unsigned long long)(uintptr_t)p, hx, id);
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin) ||
        sscanf(line, "%llx %128s %d", &at, hx, &byte) != 3 || unhex(hx, &h) ||
        ump_ipc_open(pool, &h, &q))
        return 5;
    if ((uintptr_t)q != at)
        return 10;
    if (wrong(q, ring_size(byte), (unsigned char)byte))
        return 6;
    ump_stats_t st;
    if (ump_stats(pool, UMP_DEVICE_ALL, &st) || st.share_processes < 2)
        return 7;
    if (ump_ipc_close(pool, q))
        return 8;
    printf("done\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin) || strcmp(line, "exit\n"))
        return 9;
    if (ump_free(pool, p) || ump_pool_destroy(pool))
        return 11;
    return 0;
}

/* conf NAME CONFIG: attaches with CONFIG; exits with -rc. */
static int child_conf(const char *name, const char *conf)
{
    ump_pool_t *pool;
    int rc = ump_pool_attach(name, conf, &pool);
    if (!rc)
        rc = -ump_pool_destroy(pool);
    return -rc;
}

/* alloc NAME SIZE: attaches, allocates SIZE on device 0, exits with -rc
 * of the allocation (0: it fit). */
static int child_alloc(const char *name, const char *size)
{
    ump_pool_t *pool;
    void *p;
    if (ump_pool_attach(name, NULL, &pool))
        return 100;
    int rc = ump_alloc(pool, (size_t)atoll(size), NULL, &p);
    if ((!rc && ump_free(pool, p)) || ump_pool_destroy(pool))
        return 101;
    return -rc;
}

/* export NAME: attaches, allocates 4 MiB of 0x5a, says "PTR HANDLE",
 * then at "exit" frees it and detaches while it is open elsewhere. */
static int child_export(const char *name)
{
    ump_pool_t *pool;
    void *p;
    ump_ipc_handle_t h;
    char hx[129], line[16];
    if (ump_pool_attach(name, NULL, &pool) || ump_alloc(pool, 4 * MiB, NULL,
                                                        &p) ||
        ump_ipc_get_handle(pool, p, &h))
        return 3;
    memset(p, 0x5a, 4 * MiB);
    hex(&h, hx);
    printf("%llx %s\n", (unsigned long long)(uintptr_t)p, hx);
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 4;
    return ump_free(pool, p) || ump_pool_destroy(pool) ? 5 : 0;
}

/* churn NAME: attaches, says so (a byte on stdout), then allocates,
 * exports and frees until it is killed. */
static int child_churn(const char *name, const char *seed)
{
    ump_pool_t *pool;
    void *live[16] = {0};
    if (ump_pool_attach(name, NULL, &pool))
        return 3;
    if (write(1, "a", 1) != 1)
        return 4;
    unsigned s = (unsigned)atoi(seed);
    for (;;) {
        int i = (int)(rand_r(&s) % 16);
        if (live[i]) {
            ump_free(pool, live[i]);
            live[i] = NULL;
            continue;
        }
        size_t size = (size_t)(rand_r(&s) % (6 * MiB)) + 256;
        if (ump_alloc(pool, size, NULL, &live[i]))
            live[i] = NULL;
        ump_ipc_handle_t h;
        if (live[i] && size > MiB)
            ump_ipc_get_handle(pool, live[i], &h);
    }
}

/* share NAME: shares a pool as NAME, says "shared", waits to be killed. */
static int child_share(const char *name)
{
    ump_pool_t *pool;
    if (ump_pool_create(CONF, &pool) || ump_pool_share(pool, name))
        return 3;
    printf("shared\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* hold NAME SIZE: attaches, allocates SIZE, says "held", waits to be
 * killed. */
static int child_hold(const char *name, const char *size)
{
    ump_pool_t *pool;
    void *p;
    if (ump_pool_attach(name, NULL, &pool) ||
        ump_alloc(pool, (size_t)atoll(size), NULL, &p))
        return 3;
    printf("held\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* A child of this process that only sleeps: it keeps every descriptor
 * this process has now (fork without exec). Its pid on stdout. */
static void fork_sleeper(void)
{
    pid_t k = fork();
    if (k == 0) {
        for (;;)
            pause();
    }
    printf("%d ", (int)k);
}

/* forked NAME MODE: a process with a child that keeps its descriptors.
 * MODE share: shares a pool as NAME, forks, says "PID shared", waits to
 * be killed. MODE attach: attaches, forks, says "PID attached", then at
 * "detach" detaches and says "detached", and waits to be killed. */
static int child_forked(const char *name, const char *mode)
{
    ump_pool_t *pool;
    char line[16];
    bool share = !strcmp(mode, "share");
    if (share ? ump_pool_create(CONF, &pool) || ump_pool_share(pool, name)
              : ump_pool_attach(name, NULL, &pool) != 0)
        return 3;
    fork_sleeper();
    printf("%s\n", share ? "shared" : "attached");
    fflush(stdout);
    if (!share && fgets(line, sizeof(line), stdin)) {
        if (ump_pool_destroy(pool))
            return 4;
        printf("detached\n");
        fflush(stdout);
    }
    for (;;)
        pause();
}

/* sharer NAME CONFIG: shares a pool as NAME and says "shared"; at "fork"
 * forks a child that keeps its descriptors (says "PID forked"), at
 * "stop" destroys the pool (says "stopped"), at "hold" allocates 62 MiB
 * (says "held"), at "leases" says how many it gave out, and waits to be
 * killed. */
static int child_sharer(const char *name, const char *conf)
{
    ump_pool_t *pool;
    char line[16];
    void *p;
    if (ump_pool_create(conf, &pool) || ump_pool_share(pool, name))
        return 3;
    printf("shared\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin)) {
        if (!strcmp(line, "hold\n")) {
            if (ump_alloc(pool, 62 * MiB, NULL, &p))
                return 5;
            printf("held\n");
        } else if (!strcmp(line, "leases\n")) {
            printf("%zu\n", leases(pool));
        } else if (!strcmp(line, "fork\n")) {
            fork_sleeper();
            printf("forked\n");
        } else if (!strcmp(line, "stop\n")) {
            if (ump_pool_destroy(pool))
                return 4;
            printf("stopped\n");
        }
        fflush(stdout);
    }
    for (;;)
        pause();
}

/* nopidfd NAME CONFIG: the sharer, in a process whose kernel gives no
 * pidfds (pidfd_open refused by a seccomp filter, as some sandboxes do):
 * 3 when the filter cannot be installed here. */
static int child_nopidfd(const char *name, const char *conf)
{
#if defined(__x86_64__)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) ||
        syscall(SYS_pidfd_open, getpid(), 0) >= 0 || errno != ENOSYS)
        return 3;
    return child_sharer(name, conf);
#else
    (void)name;
    (void)conf;
    return 3;
#endif
}

static pid_t spawn(const char *mode, const char *a, const char *b, int *in_p,
                   int *out_p)
{
    int in[2], out[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Gone with this program, even when a failed check skipped the
         * kill: its stdout would keep the test's log open. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        execl("/proc/self/exe", "test_share", "child", mode, a, b,
              (char *)NULL);
        _exit(99);
    }
    close(in[0]);
    close(out[1]);
    if (in_p)
        *in_p = in[1];
    else
        close(in[1]);
    *out_p = out[0];
    return pid;
}

static int wait_exit(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* One line from fd (a child's stdout), or "" at its end. */
static void read_line(int fd, char *buf, size_t size)
{
    size_t n = 0;
    while (n + 1 < size && read(fd, buf + n, 1) == 1 && buf[n++] != '\n')
        ;
    buf[n] = '\0';
}

static void say(int fd, const char *line)
{
    assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
}

/* ---- the tests ---- */

static void test_names_and_refusals(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "refusals"), *b, *c;
    assert_int_equal(ump_pool_create(CONF, &b), 0);
    assert_int_equal(ump_pool_share(b, "a/b"), -EINVAL);
    assert_int_equal(ump_pool_share(b, ""), -EINVAL);
    assert_int_equal(ump_pool_share(b, "two words"), -EINVAL);
    assert_int_equal(ump_pool_share(b, NULL), -EINVAL);
    assert_int_equal(ump_pool_share(NULL, "x"), -EINVAL);
    /* A pool is shared once. */
    assert_int_equal(ump_pool_share(a, "other"), -EBUSY);
    assert_int_equal(ump_pool_attach("..", NULL, &c), -EINVAL);
    assert_int_equal(ump_pool_attach("nothing-here", NULL, &c), -ENOENT);
    assert_int_equal(ump_pool_attach("refusals", NULL, NULL), -EINVAL);
    /* This process holds the addresses already: refused, nothing kept
     * (the sharer's thread hears the connection's end). */
    int fds = open_fds();
    assert_int_equal(ump_pool_attach("refusals", NULL, &c), -EADDRINUSE);
    assert_int_equal(wait_procs(a, 1), 1);
    for (int i = 0; i < 1000 && (leases(a) || open_fds() != fds); i++)
        nap_ms(5);
    assert_int_equal(leases(a), 0);
    assert_int_equal(open_fds(), fds);
    /* A live pool has the name. After the count of descriptors: the
     * probe that finds the name live is a connection a's thread accepts
     * and drops when it hears its end, maybe later. */
    assert_int_equal(ump_pool_share(b, "refusals"), -EADDRINUSE);
    assert_int_equal(stats(b).share_processes, 0); /* not shared */
    assert_int_equal(ump_pool_destroy(b), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
    /* The name is free again. */
    a = share_pool(CONF, "refusals");
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* The sharer and 7 processes: each allocation opened by another process
 * at the same address, in a ring. */
/* objects NAME -: attaches, allocates two small objects of 4096 bytes
 * (one slab) of bytes 0x11 and 0x22, says "PTR HANDLE PTR HANDLE"; at
 * "exit" frees them and detaches. */
static int child_objects(const char *name)
{
    ump_pool_t *pool;
    void *p[2];
    ump_ipc_handle_t h;
    char hx[129], line[16];
    if (ump_pool_attach(name, NULL, &pool))
        return 3;
    for (int i = 0; i < 2; i++) {
        if (ump_alloc(pool, 4096, NULL, &p[i]))
            return 4;
        memset(p[i], 0x11 * (i + 1), 4096);
        if (ump_ipc_get_handle(pool, p[i], &h))
            return 5;
        hex(&h, hx);
        printf("%llx %s ", (unsigned long long)(uintptr_t)p[i], hx);
    }
    printf("\n");
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin) || strcmp(line, "exit\n"))
        return 6;
    if (ump_free(pool, p[0]) || ump_free(pool, p[1]) ||
        ump_pool_destroy(pool))
        return 7;
    return 0;
}

/* Two small objects of another process's slab open at its addresses:
 * one mapping of the slab's chunk, kept until both are closed. */
static void test_objects_in_place(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "objects");
    char line[512], hx[2][129];
    unsigned long long at[2];
    void *q[2];
    ump_ipc_handle_t h;
    int in, out;
    pid_t pid = spawn("objects", "objects", "-", &in, &out);
    read_line(out, line, sizeof(line));
    assert_int_equal(sscanf(line, "%llx %128s %llx %128s", &at[0], hx[0],
                            &at[1], hx[1]),
                     4);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(unhex(hx[i], &h), 0);
        assert_int_equal(ump_ipc_open(a, &h, &q[i]), 0);
        assert_int_equal((uintptr_t)q[i], at[i]);
        assert_int_equal(wrong(q[i], 4096, (unsigned char)(0x11 * (i + 1))),
                         0);
    }
    assert_int_equal(ump_ipc_close(a, q[0]), 0);
    assert_int_equal(wrong(q[1], 4096, 0x22), 0);
    assert_int_equal(ump_ipc_close(a, q[1]), 0);
    say(in, "exit\n");
    close(in);
    close(out);
    assert_int_equal(wait_exit(pid), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

static void test_ring_of_processes(void **state)
{
    (void)state;
    enum { N = 7 };
    ump_pool_t *a = share_pool(CONF ",sim_device_mem:256M", "ring");
    void *p, *q;
    ump_ipc_handle_t h;
    char lines[N + 1][256], hx[129];
    int in[N], out[N];
    pid_t pid[N];
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p), 0);
    memset(p, 100, 8 * MiB); /* the ring: child 1 opens this */
    assert_int_equal(ump_ipc_get_handle(a, p, &h), 0);
    hex(&h, hx);
    snprintf(lines[0], sizeof(lines[0]), "%llx %s 100\n",
             (unsigned long long)(uintptr_t)p, hx);
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof(id), "%d", i + 1);
        pid[i] = spawn("ring", "ring", id, &in[i], &out[i]);
    }
    for (int i = 0; i < N; i++) {
        read_line(out[i], lines[i + 1], sizeof(lines[i + 1]));
        assert_true(strlen(lines[i + 1]) > 100);
    }
    assert_int_equal(stats(a).share_processes, N + 1);
    size_t bytes = 0;
    for (int i = 0; i <= N; i++)
        bytes += ring_size(i ? i : 100);
    assert_true(stats(a).share_bytes >= bytes);
    /* Distinct addresses: each process allocates in its own slices. */
    for (int i = 0; i <= N; i++)
        for (int j = 0; j < i; j++)
            assert_true(strtoull(lines[i], NULL, 16) !=
                        strtoull(lines[j], NULL, 16));
    /* Child i opens child i-1's (the sharer's for child 1); the sharer
     * opens the last child's, at its address too. */
    for (int i = 0; i < N; i++) {
        char buf[16];
        say(in[i], lines[i]);
        read_line(out[i], buf, sizeof(buf));
        assert_string_equal(buf, "done\n");
    }
    unsigned long long at;
    assert_int_equal(sscanf(lines[N], "%llx %128s", &at, hx), 2);
    assert_int_equal(unhex(hx, &h), 0);
    assert_int_equal(ump_ipc_open(a, &h, &q), 0);
    assert_int_equal((uintptr_t)q, at);
    assert_int_equal(wrong(q, ring_size(N), N), 0);
    assert_int_equal(ump_ipc_close(a, q), 0);
    for (int i = 0; i < N; i++) {
        say(in[i], "exit\n");
        close(in[i]);
        close(out[i]);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(wait_exit(pid[i]), 0);
    assert_int_equal(wait_procs(a, 1), 1);
    for (int i = 0; i < 1000 && leases(a); i++)
        nap_ms(5);
    assert_int_equal(leases(a), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

static int run_conf(const char *name, const char *conf)
{
    int out;
    pid_t pid = spawn("conf", name, conf, NULL, &out);
    close(out);
    return wait_exit(pid);
}

static void test_config_disagrees(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "conf");
    assert_int_equal(run_conf("conf", "chunk_size:4M"), EINVAL);
    assert_int_equal(run_conf("conf", "sim_devices:2"), EINVAL);
    assert_int_equal(run_conf("conf", "sim_device_mem:32M"), EINVAL);
    assert_int_equal(run_conf("conf", "log_level:error"), 0);
    assert_int_equal(run_conf("conf", "backend:sim,tcache:false"), 0);
    assert_int_equal(run_conf("no-such-pool", ""), ENOENT);
    assert_int_equal(wait_procs(a, 1), 1);
    assert_int_equal(ump_pool_destroy(a), 0);
}

static int run_alloc(const char *name, size_t size)
{
    char sz[32];
    int out;
    snprintf(sz, sizeof(sz), "%zu", size);
    pid_t pid = spawn("alloc", name, sz, NULL, &out);
    close(out);
    return wait_exit(pid);
}

/* The devices' memory is counted across the processes, and
 * process_limit per process. */
static void test_ledger_limits(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "ledger");
    void *p;
    assert_int_equal(ump_alloc(a, 40 * MiB, NULL, &p), 0);
    assert_int_equal(run_alloc("ledger", 32 * MiB), ENOMEM);
    assert_int_equal(run_alloc("ledger", 16 * MiB), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_trim(a), 0);
    assert_int_equal(run_alloc("ledger", 32 * MiB), 0);
    assert_int_equal(ump_pool_destroy(a), 0);

    a = share_pool(CONF ",process_limit:16M", "limited");
    assert_int_equal(ump_alloc(a, 24 * MiB, NULL, &p), -ENOMEM);
    assert_int_equal(run_alloc("limited", 16 * MiB), 0);
    assert_int_equal(run_alloc("limited", 20 * MiB), ENOMEM);
    assert_int_equal(ump_pool_destroy(a), 0);

    /* Without sharing, the same limit. */
    assert_int_equal(ump_pool_create(CONF ",process_limit:8M", &a), 0);
    assert_int_equal(ump_alloc(a, 8 * MiB, NULL, &p), 0);
    void *p2;
    assert_int_equal(ump_alloc(a, 2 * MiB, NULL, &p2), -ENOMEM);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* A process that exported an allocation detaches while the sharer has it
 * open: the bytes stay, and stay counted in the ledger; its slot and
 * leases wait for the close. */
static void test_detach_while_open(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "detach");
    char line[256], hx[129];
    unsigned long long at;
    ump_ipc_handle_t h;
    void *q, *p;
    int in, out;
    pid_t pid = spawn("export", "detach", "", &in, &out);
    read_line(out, line, sizeof(line));
    assert_int_equal(sscanf(line, "%llx %128s", &at, hx), 2);
    assert_int_equal(unhex(hx, &h), 0);
    assert_int_equal(ump_ipc_open(a, &h, &q), 0);
    assert_int_equal((uintptr_t)q, at);
    /* The sharer's own allocations never land there. */
    assert_int_equal(ump_alloc(a, 4 * MiB, NULL, &p), 0);
    assert_true((uintptr_t)p + 4 * MiB <= at || (uintptr_t)p >= at + 4 * MiB);
    say(in, "exit\n");
    assert_int_equal(wait_exit(pid), 0);
    close(in);
    close(out);
    assert_int_equal(wait_procs(a, 1), 1);
    nap_ms(300);
    assert_int_equal(leases(a), 1); /* still held: open here */
    /* The chunks its destroy released stay mapped here: counted. */
    assert_int_equal(stats(a).share_bytes, 8 * MiB);
    assert_int_equal(wrong(q, 4 * MiB, 0x5a), 0);
    assert_int_equal(ump_ipc_close(a, q), 0);
    /* The slot is cleared after its leases come back: both waited for. */
    for (int i = 0; i < 1000 && (leases(a) || stats(a).share_bytes != 4 * MiB);
         i++)
        nap_ms(5);
    assert_int_equal(leases(a), 0);
    assert_int_equal(stats(a).share_bytes, 4 * MiB);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* A sharer that died leaves its socket: attaching says so, sharing the
 * name again replaces it. */
static void test_stale_socket(void **state)
{
    (void)state;
    char line[32];
    int out;
    pid_t pid = spawn("share", "stale", "", NULL, &out);
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "shared\n");
    close(out);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    ump_pool_t *c;
    assert_int_equal(ump_pool_attach("stale", NULL, &c), -ENOENT);
    ump_pool_t *a = share_pool(CONF, "stale");
    assert_int_equal(run_alloc("stale", 4 * MiB), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* Processes killed at random points (while attaching, allocating,
 * exporting, asking for addresses), 200 times: each time the sharer takes
 * back the slot, the device memory and the addresses, so that the pool
 * then gives a new process the whole device. */
static void test_kill_at_random_points(void **state)
{
    (void)state;
    enum { KILLS = 200 };
    ump_pool_t *a = share_pool(CONF, "kill");
    int fds = open_fds(), attached = 0;
    unsigned seed = (unsigned)time(NULL);
    print_message("seed %u\n", seed);
    for (int k = 0; k < KILLS; k++) {
        char s[16];
        int out;
        snprintf(s, sizeof(s), "%d", k);
        pid_t pid = spawn("churn", "kill", s, NULL, &out);
        /* Half the time from its start (exec, attach), half from its
         * attach (allocations): 0 to 20 ms. */
        if (rand_r(&seed) % 2) {
            char c;
            if (read(out, &c, 1) == 1)
                attached++;
        }
        nap_ms((long)(rand_r(&seed) % 21));
        assert_int_equal(kill(pid, SIGKILL), 0);
        assert_int_equal(wait_exit(pid), 128 + SIGKILL);
        close(out);
        assert_int_equal(wait_procs(a, 1), 1);
    }
    for (int i = 0; i < 1000 && leases(a); i++)
        nap_ms(5);
    assert_int_equal(leases(a), 0);
    ump_stats_t st = stats(a);
    assert_int_equal(st.share_bytes, st.reserved_bytes);
    assert_int_equal(open_fds(), fds);
    print_message("%d kills, %d of them after the attach\n", KILLS,
                  attached);
    /* Nothing of them is left: a new process gets the whole device. */
    assert_int_equal(ump_trim(a), 0);
    assert_int_equal(run_alloc("kill", 60 * MiB), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* The room other processes held comes back when they end: the sharer's
 * own capacity is not lowered by the ledger's refusals. The ledger is
 * sealed at its size: no process of the pool can shrink it under the
 * others. */
static void test_room_comes_back(void **state)
{
    (void)state;
    ump_pool_t *a = share_pool(CONF, "room");
    char line[16];
    void *p;
    int out;
    assert_int_equal(ftruncate(a->share->ledger_fd, 0), -1);
    assert_int_equal(errno, EPERM);
    pid_t pid = spawn("hold", "room", "48000000", NULL, &out);
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "held\n");
    assert_int_equal(ump_alloc(a, 32 * MiB, NULL, &p), -ENOMEM);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    close(out);
    assert_int_equal(wait_procs(a, 1), 1);
    for (int i = 0; i < 1000 && stats(a).share_bytes; i++)
        nap_ms(5);
    assert_int_equal(ump_alloc(a, 32 * MiB, NULL, &p), 0);
    assert_int_equal(ump_free(a, p), 0);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* Children forked without exec keep a process's sockets: none of it
 * hides the process's end or detach. */
static void test_forked_children(void **state)
{
    (void)state;
    char line[64];
    int in, out;
    /* A sharer that died, its child still holding the listener: the name
     * is free (attach: -ENOENT, at once; share: replaces it). */
    pid_t pid = spawn("forked", "orphan", "share", NULL, &out);
    read_line(out, line, sizeof(line));
    int sleeper = atoi(line);
    assert_non_null(strstr(line, "shared"));
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    close(out);
    ump_pool_t *c, *a;
    assert_int_equal(ump_pool_attach("orphan", NULL, &c), -ENOENT);
    a = share_pool(CONF, "orphan");
    assert_int_equal(kill(sleeper, SIGKILL), 0);
    /* An attached process with a child: its detach is heard... */
    pid = spawn("forked", "orphan", "attach", &in, &out);
    read_line(out, line, sizeof(line));
    sleeper = atoi(line);
    assert_non_null(strstr(line, "attached"));
    assert_int_equal(stats(a).share_processes, 2);
    say(in, "detach\n");
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "detached\n");
    assert_int_equal(wait_procs(a, 1), 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    assert_int_equal(kill(sleeper, SIGKILL), 0);
    close(in);
    close(out);
    /* ... and so is its death. */
    pid = spawn("forked", "orphan", "attach", &in, &out);
    read_line(out, line, sizeof(line));
    sleeper = atoi(line);
    assert_int_equal(stats(a).share_processes, 2);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    assert_int_equal(wait_procs(a, 1), 1);
    for (int i = 0; i < 1000 && leases(a); i++)
        nap_ms(5);
    assert_int_equal(leases(a), 0);
    assert_int_equal(kill(sleeper, SIGKILL), 0);
    close(in);
    close(out);
    assert_int_equal(ump_pool_destroy(a), 0);
}

/* The sharer stops (its pool destroyed) while a child it forked keeps
 * its connections: an attached pool keeps what it has, counts the sharer
 * no more, and a request for more addresses fails at once instead of
 * waiting for an answer nobody gives. */
static void test_sharer_stops(void **state)
{
    (void)state;
    char line[64];
    int in, out;
    ump_pool_t *c;
    void *p, *q;
    /* 64 granules of addresses: a lease is 2 (4 MiB). */
    pid_t pid = spawn("sharer", "stops", CONF ",va_size:128M", &in, &out);
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "shared\n");
    assert_int_equal(ump_pool_attach("stops", NULL, &c), 0);
    assert_int_equal(ump_alloc(c, 4 * MiB, NULL, &p), 0);
    memset(p, 7, 4 * MiB);
    assert_int_equal(stats(c).share_processes, 2);
    say(in, "fork\n");
    read_line(out, line, sizeof(line));
    int sleeper = atoi(line);
    assert_non_null(strstr(line, "forked"));
    say(in, "stop\n");
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "stopped\n");
    assert_int_equal(stats(c).share_processes, 1);
    assert_int_equal(wrong(p, 4 * MiB, 7), 0);
    /* Past the first lease: a lease nobody gives. */
    assert_int_equal(ump_alloc(c, 2 * MiB, NULL, &q), -ENOMEM);
    assert_int_equal(ump_free(c, p), 0);
    assert_int_equal(ump_pool_destroy(c), 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    assert_int_equal(kill(sleeper, SIGKILL), 0);
    close(in);
    close(out);
}

/* The sharer killed (it says nothing, as a destroy does): the attached
 * pool counts it no more, nor the device memory it held, whose room
 * comes back. */
static void test_sharer_killed(void **state)
{
    (void)state;
    char line[64];
    int in, out;
    ump_pool_t *c;
    void *p;
    /* 64 granules of addresses: a lease is 2 (4 MiB). */
    pid_t pid = spawn("sharer", "killed", CONF ",va_size:128M", &in, &out);
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "shared\n");
    assert_int_equal(ump_pool_attach("killed", NULL, &c), 0);
    /* A lease here, its memory given back. */
    assert_int_equal(ump_alloc(c, 4 * MiB, NULL, &p), 0);
    assert_int_equal(ump_free(c, p), 0);
    assert_int_equal(ump_trim(c), 0);
    say(in, "hold\n");
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "held\n");
    assert_int_equal(ump_alloc(c, 4 * MiB, NULL, &p), -ENOMEM);
    assert_int_equal(ump_trim(c), 0); /* the chunk it made on its way */
    ump_stats_t st = stats(c);
    assert_int_equal(st.share_processes, 2);
    assert_int_equal(st.share_bytes, 62 * MiB);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    st = stats(c);
    assert_int_equal(st.share_processes, 1);
    assert_int_equal(st.share_bytes, 0);
    assert_int_equal(ump_alloc(c, 4 * MiB, NULL, &p), 0);
    assert_int_equal(stats(c).share_bytes, 4 * MiB);
    assert_int_equal(ump_free(c, p), 0);
    assert_int_equal(ump_pool_destroy(c), 0);
    close(in);
    close(out);
}

/* Without pidfds the sharer still tells a process that ended from one
 * whose connection it dropped (a malformed request): the first's slot
 * and leases come back, the second keeps them while it lives (given out
 * again, two processes would allocate at one address). */
static void test_no_pidfds(void **state)
{
    (void)state;
    char line[64];
    int in, out;
    ump_pool_t *c;
    pid_t pid = spawn("nopidfd", "nopidfd", CONF ",va_size:128M", &in, &out);
    read_line(out, line, sizeof(line));
    if (strcmp(line, "shared\n")) {
        assert_int_equal(wait_exit(pid), 3);
        close(in);
        close(out);
        skip(); /* no seccomp filter here: nothing to test */
    }
    /* A process that attaches, allocates and ends: taken back. */
    assert_int_equal(run_alloc("nopidfd", 4 * MiB), 0);
    for (int i = 0; i < 1000; i++) {
        say(in, "leases\n");
        read_line(out, line, sizeof(line));
        if (!strcmp(line, "0\n"))
            break;
        nap_ms(5);
    }
    assert_string_equal(line, "0\n");
    /* This one, alive, its connection dropped by the sharer. */
    assert_int_equal(ump_pool_attach("nopidfd", NULL, &c), 0);
    struct share_req bad = {.op = 99};
    assert_int_equal(write(c->share->fd, &bad, sizeof(bad)),
                     (ssize_t)sizeof(bad));
    nap_ms(300); /* the sharer's reclaim looks every 100 ms */
    say(in, "leases\n");
    read_line(out, line, sizeof(line));
    assert_string_equal(line, "1\n");
    assert_int_equal(ump_pool_destroy(c), 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(wait_exit(pid), 128 + SIGKILL);
    close(in);
    close(out);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "child")) {
        const char *m = argv[2];
        if (!strcmp(m, "ring"))
            return child_ring(argv[3], atoi(argv[4]));
        if (!strcmp(m, "objects"))
            return child_objects(argv[3]);
        if (!strcmp(m, "conf"))
            return child_conf(argv[3], argv[4]);
        if (!strcmp(m, "alloc"))
            return child_alloc(argv[3], argv[4]);
        if (!strcmp(m, "export"))
            return child_export(argv[3]);
        if (!strcmp(m, "churn"))
            return child_churn(argv[3], argv[4]);
        if (!strcmp(m, "share"))
            return child_share(argv[3]);
        if (!strcmp(m, "hold"))
            return child_hold(argv[3], argv[4]);
        if (!strcmp(m, "sharer"))
            return child_sharer(argv[3], argv[4]);
        if (!strcmp(m, "forked"))
            return child_forked(argv[3], argv[4]);
        if (!strcmp(m, "nopidfd"))
            return child_nopidfd(argv[3], argv[4]);
        return 98;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_refusals),
        cmocka_unit_test(test_ring_of_processes),
        cmocka_unit_test(test_objects_in_place),
        cmocka_unit_test(test_config_disagrees),
        cmocka_unit_test(test_ledger_limits),
        cmocka_unit_test(test_detach_while_open),
        cmocka_unit_test(test_stale_socket),
        cmocka_unit_test(test_room_comes_back),
        cmocka_unit_test(test_forked_children),
        cmocka_unit_test(test_sharer_stops),
        cmocka_unit_test(test_sharer_killed),
        cmocka_unit_test(test_no_pidfds),
        cmocka_unit_test(test_kill_at_random_points),
    };
    return cmocka_run_group_tests(tests, rundir_setup, rundir_teardown);
}
