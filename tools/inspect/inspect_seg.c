#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "inspect_seg.h"

#define WAIT_MS 300     /* for fresh snapshots from running writers */
#define COPY_TRIES 200  /* seqlock retries, 1 ms apart */

static int seg_cmp(const void *a, const void *b)
{
    const struct seg *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->pid_ns != y->pid_ns)
        return x->pid_ns < y->pid_ns ? -1 : 1;
    if (x->pool_id != y->pool_id)
        return x->pool_id < y->pool_id ? -1 : 1;
    return (int)x->hidden - (int)y->hidden;
}

int seg_scan(const char *dir, uint32_t uid, bool with_hidden,
             struct seg **segs_p, size_t *n_p, size_t *foreign_p,
             char *foreign, size_t foreignlen, char *err, size_t errlen)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        int rc = -errno;
        snprintf(err, errlen, "%s: %s", dir, strerror(-rc));
        return rc;
    }
    struct seg *segs = NULL;
    size_t n = 0, cap = 0, nforeign = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        bool hidden = de->d_name[0] == '.';
        struct seg s = {.hidden = hidden};
        struct snap_name sn;
        if ((hidden && !with_hidden) ||
            !snap_name_parse(de->d_name + hidden, &sn) || sn.uid != uid)
            continue;
        s.uid = sn.uid;
        s.pid_ns = sn.pid_ns;
        s.pid = sn.pid;
        s.pool_id = sn.pool_id;
        if ((size_t)snprintf(s.path, sizeof(s.path), "%s/%s", dir,
                             de->d_name) >= sizeof(s.path))
            continue;
        /* Anyone may create a file under our name in a shared /dev/shm:
         * another user's is none of ours, not even an error. */
        struct stat st;
        if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno == ENOENT)
                continue;
            s.owner = (uid_t)-1; /* reading it will say why */
        } else if (st.st_uid != uid) {
            if (!nforeign++)
                snprintf(foreign, foreignlen, "%s", s.path);
            continue;
        } else {
            s.dev = st.st_dev;
            s.ino = st.st_ino;
            s.ctime = st.st_ctim;
            s.owner = st.st_uid;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct seg *bigger = realloc(segs, cap * sizeof(*segs));
            if (!bigger) {
                rc = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
            segs = bigger;
        }
        segs[n++] = s;
    }
    closedir(dp);
    if (rc) {
        free(segs);
        return rc;
    }
    if (n)
        qsort(segs, n, sizeof(*segs), seg_cmp);
    *segs_p = segs;
    *n_p = n;
    *foreign_p = nforeign;
    return 0;
}

void seg_free_all(struct seg *segs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        snap_view_free(&segs[i].view);
    free(segs);
}

int seg_liveness(int32_t pid, uint64_t start)
{
    if (pid <= 0 || (kill(pid, 0) && errno == ESRCH))
        return SEG_EXITED;
    uint64_t now;
    if (start && !snap_proc_start(pid, &now) && now != start)
        return SEG_REUSED;
    return SEG_RUNNING;
}

/* ---- touching a mapping that its owner could truncate ------------------- */

/* A file shrunk under a mapping raises SIGBUS on access: every access to
 * a segment's mapping runs under this guard and fails instead. */
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

static void on_bus(int sig)
{
    if (bus_armed)
        siglongjmp(bus_jmp, 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

enum touch { TOUCH_SEQ, TOUCH_REQUEST, TOUCH_COPY };

static int touch(struct seg *s, enum touch what, void *dst, uint64_t *seq_p)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_bus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old);
    if (sigsetjmp(bus_jmp, 1)) {
        bus_armed = 0;
        sigaction(SIGBUS, &old, NULL);
        return -EFAULT;
    }
    bus_armed = 1;
    int rc = 0;
    switch (what) {
    case TOUCH_SEQ:
        *seq_p = snap_seq(s->map);
        break;
    case TOUCH_REQUEST:
        atomic_fetch_add(&s->map->request, 1);
        syscall(SYS_futex, (uint32_t *)&s->map->request, FUTEX_WAKE, INT_MAX,
                NULL, NULL, 0);
        break;
    case TOUCH_COPY:
        rc = snap_copy(s->map, s->len, dst);
        break;
    }
    bus_armed = 0;
    sigaction(SIGBUS, &old, NULL);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

/* Opens path and checks what can be checked before reading: the owner
 * and the size. Returns the descriptor, or a negative errno (err set). */
static int open_checked(const char *path, const struct snap_expect *base,
                        bool *writable_p, struct stat *st_p,
                        struct snap_expect *ex_p, char *err, size_t errlen)
{
    /* Read-write to ask for a refresh; a segment we may only read is
     * still shown. O_NONBLOCK: a FIFO planted under the name must not
     * hang us. */
    bool writable = true;
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        writable = false;
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0) {
        int rc = -errno;
        snprintf(err, errlen, "%s", strerror(-rc));
        return rc;
    }
    int rc = 0;
    if (fstat(fd, st_p)) {
        rc = -errno;
        snprintf(err, errlen, "%s", strerror(-rc));
    } else if (!S_ISREG(st_p->st_mode)) {
        rc = -EINVAL;
        snprintf(err, errlen, "not a regular file");
    }
    if (!rc) {
        *ex_p = *base;
        ex_p->file_uid = (uint32_t)st_p->st_uid;
        rc = snap_check_owner(ex_p, err, errlen);
    }
    if (!rc && (uint64_t)st_p->st_size > snap_size_max()) {
        rc = -EINVAL;
        snprintf(err, errlen, "%lld bytes, more than any snapshot (%zu)",
                 (long long)st_p->st_size, snap_size_max());
    }
    if (rc) {
        close(fd);
        return rc;
    }
    *writable_p = writable;
    return fd;
}

/* Reads a whole small file (at most snap_size_max bytes) and parses it. */
static int read_parse(int fd, size_t len, const struct snap_expect *ex,
                      struct snap_view *view_p, char *err, size_t errlen)
{
    char *buf = malloc(len ? len : 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, buf + got, len - got, (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    int rc = snap_parse(buf, got, ex, view_p, err, errlen);
    free(buf);
    return rc;
}

/* Maps s, or reads and checks it at once when it is too short to map. */
static void seg_map(struct seg *s, uint32_t uid)
{
    struct snap_expect base = {uid, 0, s->pid, s->pool_id, s->pid_ns}, ex;
    struct stat st;
    int fd = open_checked(s->path, &base, &s->writable, &st, &ex, s->err,
                          sizeof(s->err));
    if (fd < 0) {
        s->rc = fd;
        return;
    }
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->ctime = st.st_ctim;
    s->owner = st.st_uid;
    s->len = (size_t)st.st_size;
    if (s->len < sizeof(struct snap_header)) {
        s->rc = read_parse(fd, s->len, &ex, &s->view, s->err,
                           sizeof(s->err));
        close(fd);
        return;
    }
    void *m = mmap(NULL, s->len,
                   PROT_READ | (s->writable ? PROT_WRITE : 0), MAP_SHARED, fd,
                   0);
    close(fd);
    if (m == MAP_FAILED) {
        s->rc = -errno;
        snprintf(s->err, sizeof(s->err), "%s", strerror(-s->rc));
        return;
    }
    s->map = m;
    s->rc = -EAGAIN; /* mapped, not read yet */
}

static void seg_unmap(struct seg *s)
{
    if (s->map)
        munmap(s->map, s->len);
    s->map = NULL;
}

/* Copies a mapped segment consistently and checks the copy. */
static void seg_read_mapped(struct seg *s, uint32_t uid)
{
    char *buf = malloc(s->len);
    if (!buf) {
        s->rc = -ENOMEM;
        snprintf(s->err, sizeof(s->err), "out of memory");
        return;
    }
    int rc = -EAGAIN;
    for (int i = 0; i < COPY_TRIES && rc == -EAGAIN; i++) {
        rc = touch(s, TOUCH_COPY, buf, NULL);
        if (rc == -EAGAIN)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (rc == -EAGAIN) {
        snprintf(s->err, sizeof(s->err), "always being rewritten: no "
                 "consistent copy");
    } else if (rc) {
        snprintf(s->err, sizeof(s->err), "truncated while being read");
    } else {
        struct snap_expect ex = {uid, uid, s->pid, s->pool_id, s->pid_ns};
        rc = snap_parse(buf, s->len, &ex, &s->view, s->err, sizeof(s->err));
    }
    free(buf);
    s->rc = rc;
}

/* The file's ctime once it has been read, so that our own request for a
 * refresh does not count as a change. */
static void settle(struct seg *s)
{
    struct stat st;
    if (!lstat(s->path, &st) && st.st_dev == s->dev && st.st_ino == s->ino)
        s->ctime = st.st_ctim;
}

/* Whether s's writer is known to run: only a pid of our namespace says. */
static bool running(const struct seg *s, uint32_t pid_ns)
{
    return s->pid_ns == pid_ns && seg_liveness(s->pid, 0) == SEG_RUNNING;
}

void seg_load_all(struct seg *segs, size_t n, bool refresh, uint32_t pid_ns)
{
    uint32_t uid = (uint32_t)geteuid();
    bool asked = false;
    for (size_t i = 0; i < n; i++) {
        struct seg *s = &segs[i];
        if (s->hidden) { /* half made: only its pid matters (--clean) */
            s->rc = -EAGAIN;
            snprintf(s->err, sizeof(s->err), "being created");
            continue;
        }
        seg_map(s, uid);
        if (!s->map)
            continue;
        if (touch(s, TOUCH_SEQ, NULL, &s->seq0))
            continue;
        if (refresh && s->writable && !s->hidden && running(s, pid_ns) &&
            !touch(s, TOUCH_REQUEST, NULL, NULL))
            asked = true;
    }
    /* Running writers answer within 100 ms; a stopped one is shown as it
     * last wrote. */
    for (int waited = 0; asked && waited < WAIT_MS; waited += 5) {
        bool all = true;
        for (size_t i = 0; i < n && all; i++) {
            uint64_t seq;
            struct seg *s = &segs[i];
            if (s->map && s->writable && !s->hidden &&
                !touch(s, TOUCH_SEQ, NULL, &seq) &&
                (seq == s->seq0 || (seq & 1)) && running(s, pid_ns))
                all = false;
        }
        if (all)
            break;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        struct seg *s = &segs[i];
        if (s->map) {
            seg_read_mapped(s, uid);
            seg_unmap(s);
            settle(s);
        }
        s->status = s->pid_ns != pid_ns
                        ? SEG_UNKNOWN
                        : seg_liveness(s->pid,
                                       s->rc ? 0 : s->view.hdr->pid_start);
    }
}

bool seg_removable(const struct seg *s, uint32_t uid)
{
    return (s->status == SEG_EXITED || s->status == SEG_REUSED) &&
           s->rc != -EPERM && s->ino && s->owner == (uid_t)uid;
}

int seg_remove(const struct seg *s, uint32_t uid)
{
    int fd = open(s->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP ? -ESTALE : -errno;
    struct stat st;
    int rc = fstat(fd, &st) ? -errno : 0;
    close(fd);
    if (!rc && (st.st_dev != s->dev || st.st_ino != s->ino ||
                st.st_ctim.tv_sec != s->ctime.tv_sec ||
                st.st_ctim.tv_nsec != s->ctime.tv_nsec ||
                st.st_uid != (uid_t)uid))
        rc = -ESTALE;
    if (!rc && unlink(s->path))
        rc = -errno;
    return rc;
}

int seg_load_file(const char *path, struct snap_view *view_p, char *err,
                  size_t errlen)
{
    struct snap_expect base = {(uint32_t)geteuid(), 0, 0, 0, 0}, ex;
    struct stat st;
    bool writable;
    int fd = open_checked(path, &base, &writable, &st, &ex, err, errlen);
    if (fd < 0)
        return fd;
    int rc = read_parse(fd, (size_t)st.st_size, &ex, view_p, err, errlen);
    close(fd);
    return rc;
}
