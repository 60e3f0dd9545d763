/*
 * Unix sockets between the processes of one user (unixsock.h).
 *
 * Why a directory of the user's own and a check of the peer both: the
 * directory (0700) keeps other users from reaching the socket file at
 * all, and SO_PEERCRED catches what a directory cannot (a descriptor
 * passed on, root's processes, a directory made by a careless script).
 * Replacing a stale socket happens under an flock of NAME.lock, which
 * the kernel drops when its holder dies: two processes that find the same
 * stale socket cannot both replace it, one removing the other's new one.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"
#include "util/unixsock.h"

int usock_name_check(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    for (size_t i = 0; i < n && n <= 64; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
            n = 0;
    }
    if (n == 0 || n > 64) {
        ump_log_error("'%s' is not a pool name: 1 to 64 letters, digits, "
                      "'-' or '_'", name ? name : "(null)");
        return -EINVAL;
    }
    return 0;
}

int usock_dir(char *buf, size_t size)
{
    const char *x = secure_getenv("XDG_RUNTIME_DIR");
    struct stat st;
    int n;

    if (x && x[0] == '/')
        n = snprintf(buf, size, "%s/umpool", x);
    else
        n = snprintf(buf, size, "/tmp/umpool-%u", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= size) {
        ump_log_error("the socket directory's path is too long");
        return -ENAMETOOLONG;
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
        int err = -errno;
        ump_log_error("cannot make the socket directory %s: %s", buf,
                      strerror(-err));
        return err;
    }
    if (lstat(buf, &st) != 0) {
        int err = -errno;
        ump_log_error("socket directory %s: %s", buf, strerror(-err));
        return err;
    }
    const char *why = !S_ISDIR(st.st_mode)      ? "is not a directory"
                      : st.st_uid != geteuid()  ? "belongs to another user"
                      : (st.st_mode & 077) != 0 ? "is open to other users"
                                                : NULL;
    if (why) {
        ump_log_error("socket directory %s %s: refused (it must be the "
                      "user's own, mode 0700)", buf, why);
        return -EPERM;
    }
    return 0;
}

static int addr_of(const char *path, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(a->sun_path)) {
        ump_log_error("socket path %s is too long", path);
        return -ENAMETOOLONG;
    }
    strcpy(a->sun_path, path);
    return 0;
}

static int new_socket(int *fd_p, int flags)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | flags, 0);
    if (fd < 0) {
        int err = -errno;
        ump_log_error("socket: %s", strerror(-err));
        return err;
    }
    *fd_p = fd;
    return 0;
}

/* connect() to path; quiet: refusals are not logged (the stale check).
 * Non-blocking: a Unix socket's connect waits while the listener's queue
 * is full, which a wedged listener would make forever. */
static int connect_to(const char *path, int *fd_p, bool quiet)
{
    struct sockaddr_un a;
    int fd = -1, err = addr_of(path, &a);

    if (err || (err = new_socket(&fd, SOCK_NONBLOCK)))
        return err;
    while (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (errno == EINTR)
            continue;
        err = errno == EINPROGRESS ? -EAGAIN : -errno;
        close(fd);
        if (!quiet || (err != -ENOENT && err != -ECONNREFUSED &&
                       err != -EAGAIN))
            ump_log_error("cannot connect to %s: %s%s", path, strerror(-err),
                          err == -ECONNREFUSED ? " (a stale socket: its "
                                                 "process has ended)"
                          : err == -EAGAIN ? " (its process accepts no "
                                             "more connections now)"
                                           : "");
        return err;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        err = -errno;
        ump_log_error("cannot connect to %s: %s", path, strerror(-err));
        close(fd);
        return err;
    }
    *fd_p = fd;
    return 0;
}

int usock_connect_path(const char *path, int *fd_p)
{
    return connect_to(path, fd_p, false);
}

/* Binds fd to path, replacing a stale socket there. Lock held. */
static int bind_fresh(int fd, const char *path, const struct sockaddr_un *a)
{
    struct stat st;
    int other, err;

    if (bind(fd, (const struct sockaddr *)a, sizeof(*a)) == 0)
        return 0;
    if (errno != EADDRINUSE) {
        err = -errno;
        ump_log_error("cannot bind %s: %s", path, strerror(-err));
        return err;
    }
    if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        ump_log_error("%s exists and is not a socket: left as it is", path);
        return -EEXIST;
    }
    err = connect_to(path, &other, true);
    if (!err) {
        /* Accepting, but maybe only by a child that inherited the
         * listener of a process that is gone (fork without exec): the
         * credentials are the listener's maker's. */
        struct ucred cr;
        socklen_t len = sizeof(cr);
        bool dead = getsockopt(other, SOL_SOCKET, SO_PEERCRED, &cr, &len) ==
                        0 &&
                    cr.pid > 0 && kill(cr.pid, 0) != 0 && errno == ESRCH;
        close(other);
        if (dead)
            err = -ECONNREFUSED;
    }
    if (!err || err == -EAGAIN) {
        ump_log_error("%s is in use by a live process", path);
        return -EADDRINUSE;
    }
    if (err != -ECONNREFUSED && err != -ENOENT)
        return err;
    ump_log_info("replacing the stale socket %s", path);
    if (unlink(path) != 0 && errno != ENOENT) {
        err = -errno;
        ump_log_error("cannot remove the stale socket %s: %s", path,
                      strerror(-err));
        return err;
    }
    if (bind(fd, (const struct sockaddr *)a, sizeof(*a)) != 0) {
        err = -errno;
        ump_log_error("cannot bind %s: %s", path, strerror(-err));
        return err;
    }
    return 0;
}

/* The flock that orders the replacements of path's socket and their
 * removal: its descriptor (closing it unlocks), or a negative errno. */
static int name_lock(const char *path)
{
    char lockpath[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    int lock, err;

    snprintf(lockpath, sizeof(lockpath), "%s.lock", path);
    lock = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock < 0) {
        err = -errno;
        ump_log_error("cannot open %s: %s", lockpath, strerror(-err));
        return err;
    }
    while (flock(lock, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        err = -errno;
        ump_log_error("cannot lock %s: %s", lockpath, strerror(-err));
        close(lock);
        return err;
    }
    return lock;
}

int usock_listen_path(const char *path, struct usock_listener *l)
{
    struct sockaddr_un a;
    int fd = -1, lock, err = addr_of(path, &a);

    if (err || (err = new_socket(&fd, 0)))
        return err;
    lock = name_lock(path);
    if (lock < 0) {
        close(fd);
        return lock;
    }
    err = bind_fresh(fd, path, &a);
    if (!err && chmod(path, 0600) != 0) {
        err = -errno;
        ump_log_error("cannot set the mode of %s: %s", path, strerror(-err));
        unlink(path);
    }
    if (!err && listen(fd, 64) != 0) {
        err = -errno;
        ump_log_error("cannot listen on %s: %s", path, strerror(-err));
        unlink(path);
    }
    close(lock); /* the flock goes with it */
    if (err) {
        close(fd);
        return err;
    }
    l->fd = fd;
    strcpy(l->path, path);
    return 0;
}

/* Whether l's path leads to l: its pending connections dropped, a
 * connection made through the path then waits on l, and on nothing else
 * (a file's identity would not do: a replacement may get the same inode
 * number and time stamps). Name lock held, so no replacement meanwhile. */
static bool path_is_own(const struct usock_listener *l)
{
    int fl = fcntl(l->fd, F_GETFL), c;
    bool own = false;

    if (fl < 0 || fcntl(l->fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return false;
    while ((c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        close(c);
    if (connect_to(l->path, &c, true) == 0) {
        struct pollfd pf = {.fd = l->fd, .events = POLLIN};
        own = poll(&pf, 1, 0) == 1;
        close(c);
    }
    return own;
}

static void unlisten(struct usock_listener *l, bool unique)
{
    if (l->fd < 0)
        return;
    int lock = name_lock(l->path);
    if (lock >= 0) { /* else left: the next listener finds it stale */
        if (path_is_own(l)) {
            unlink(l->path);
            if (unique) { /* nobody else waits on it: it goes too */
                char lockpath[sizeof(l->path) + 8];
                snprintf(lockpath, sizeof(lockpath), "%s.lock", l->path);
                unlink(lockpath);
            }
        }
        close(lock);
    }
    /* The socket itself stops listening, not only this descriptor: a
     * child forked without exec keeps a copy, through which connections
     * would queue with nobody to answer them. */
    shutdown(l->fd, SHUT_RDWR);
    close(l->fd);
    l->fd = -1;
}

void usock_unlisten(struct usock_listener *l)
{
    unlisten(l, false);
}

void usock_unlisten_unique(struct usock_listener *l)
{
    unlisten(l, true);
}

int usock_accept(struct usock_listener *l, int *fd_p)
{
    int c;
    do
        c = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    while (c < 0 && errno == EINTR);
    if (c < 0) {
        int err = -errno;
        if (err != -EAGAIN && err != -EWOULDBLOCK && err != -ECONNABORTED)
            ump_log_error("cannot accept on %s: %s", l->path, strerror(-err));
        return err == -ECONNABORTED || err == -EWOULDBLOCK ? -EAGAIN : err;
    }
    int err = usock_peer_check(c, NULL);
    if (err) {
        close(c);
        return err;
    }
    *fd_p = c;
    return 0;
}

/* DIR/name into buf, both checked. */
static int path_of(const char *name, char *buf, size_t size)
{
    int err = usock_name_check(name);
    if (err || (err = usock_dir(buf, size)))
        return err;
    size_t n = strlen(buf);
    if (n + 1 + strlen(name) >= size) {
        ump_log_error("the socket path of %s is too long", name);
        return -ENAMETOOLONG;
    }
    buf[n] = '/';
    strcpy(buf + n + 1, name);
    return 0;
}

int usock_listen(const char *name, struct usock_listener *l)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int err = path_of(name, path, sizeof(path));
    return err ? err : usock_listen_path(path, l);
}

int usock_connect(const char *name, int *fd_p)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int err = path_of(name, path, sizeof(path));
    return err ? err : usock_connect_path(path, fd_p);
}

int usock_peer_check(int sock, pid_t *pid_p)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);

    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        int err = -errno;
        ump_log_error("cannot read the peer's credentials: %s",
                      strerror(-err));
        return err;
    }
    if (cr.uid != geteuid()) {
        ump_log_error("process %d of user %u refused: only user %u's "
                      "processes share this pool", (int)cr.pid,
                      (unsigned)cr.uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (pid_p)
        *pid_p = cr.pid;
    return 0;
}

int usock_send(int sock, const void *buf, size_t len, const int *fds,
               int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * USOCK_MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

    if (!buf || !len || nfds < 0 || nfds > USOCK_MAX_FDS ||
        (nfds && !fds)) {
        ump_log_error("usock_send: bad arguments");
        return -EINVAL;
    }
    if (nfds) {
        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return 0;
        if (n >= 0) { /* a packet socket sends whole or not at all */
            ump_log_error("usock_send: %zd of %zu bytes sent", n, len);
            return -EPROTO;
        }
        if (errno == EINTR)
            continue;
        int err = -errno;
        if (err != -EPIPE && err != -ECONNRESET)
            ump_log_error("usock_send: %s", strerror(-err));
        return err == -ECONNRESET ? -EPIPE : err;
    }
}

/* Closes the n descriptors of fds. */
static void close_all(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

int usock_recv(int sock, void *buf, size_t len, int *fds, int maxfds,
               int *nfds_p)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * USOCK_MAX_FDS)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr m;
    int got[USOCK_MAX_FDS], ngot = 0;
    ssize_t n;

    if (!buf || !len || maxfds < 0 || (maxfds && (!fds || !nfds_p))) {
        ump_log_error("usock_recv: bad arguments");
        return -EINVAL;
    }
    do {
        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        int err = -errno;
        if (err != -ECONNRESET)
            ump_log_error("usock_recv: %s", strerror(-err));
        return err;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && ngot < USOCK_MAX_FDS; i++)
            memcpy(&got[ngot++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (n == 0 && !ngot)
        return -ECONNRESET;
    if ((size_t)n != len || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        ngot > maxfds) {
        ump_log_error("usock_recv: a message of %zd bytes and %d "
                      "descriptors%s, not %zu bytes and at most %d: "
                      "refused", n, ngot,
                      m.msg_flags & (MSG_TRUNC | MSG_CTRUNC) ? " (cut)" : "",
                      len, maxfds);
        close_all(got, ngot);
        return -EPROTO;
    }
    if (ngot)
        memcpy(fds, got, sizeof(int) * (size_t)ngot);
    if (nfds_p)
        *nfds_p = ngot;
    return 0;
}

int usock_recv_watched(int sock, int pidfd, void *buf, size_t len, int *fds,
                       int maxfds, int *nfds_p)
{
    struct pollfd pf[2] = {{sock, POLLIN, 0}, {pidfd, POLLIN, 0}};
    for (;;) {
        int n = poll(pf, pidfd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (pf[0].revents)
            return usock_recv(sock, buf, len, fds, maxfds, nfds_p);
        if (pf[1].revents)
            return -ECONNRESET;
    }
}

int usock_peer_pidfd(int sock)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
        return -errno;
    /* pidfd_open's descriptors are close-on-exec always. */
    int fd = (int)syscall(SYS_pidfd_open, cr.pid, 0);
    return fd >= 0 ? fd : -errno;
}
