/* The Unix socket transport (lib/util/unixsock.c): names, the user's
 * socket directory, stale sockets, peers of another user, and messages
 * carrying file descriptors. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdcount.h"
#include "rundir.h"
#include "util/unixsock.h"

static void test_names(void **state)
{
    (void)state;
    /* 64 characters and 65 */
    const char *good[] = {"a", "pool-1", "A_b-9",
                          ("0123456789012345678901234567890123456789012345678"
                           "901234567890123")};
    const char *bad[] = {"", "a/b", "..", "a.b", "a b", "x\n", "-\xc3\xa9",
                         ("0123456789012345678901234567890123456789012345678"
                          "9012345678901234")};
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
        assert_int_equal(usock_name_check(good[i]), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        assert_int_equal(usock_name_check(bad[i]), -EINVAL);
    assert_int_equal(usock_name_check(NULL), -EINVAL);
    struct usock_listener l;
    int fd;
    assert_int_equal(usock_listen("../x", &l), -EINVAL);
    assert_int_equal(usock_connect("a/b", &fd), -EINVAL);
}

/* Made 0700 in $XDG_RUNTIME_DIR; refused when open to others, a link,
 * not a directory, or (as root) another user's. */
static void test_dir(void **state)
{
    (void)state;
    char dir[256], want[128];
    struct stat st;

    snprintf(want, sizeof(want), "%s/umpool", rundir);
    assert_int_equal(usock_dir(dir, sizeof(dir)), 0);
    assert_string_equal(dir, want);
    assert_int_equal(lstat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(usock_dir(dir, sizeof(dir)), 0); /* there already */
    assert_int_equal(usock_dir(dir, 10), -ENAMETOOLONG);

    assert_int_equal(chmod(want, 0750), 0);
    assert_int_equal(usock_dir(dir, sizeof(dir)), -EPERM);
    assert_int_equal(chmod(want, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(want, 65534, 65534), 0);
        assert_int_equal(usock_dir(dir, sizeof(dir)), -EPERM);
        assert_int_equal(chown(want, 0, 0), 0);
    }
    char moved[160];
    snprintf(moved, sizeof(moved), "%s/real", rundir);
    assert_int_equal(rename(want, moved), 0);
    assert_int_equal(symlink(moved, want), 0);
    assert_int_equal(usock_dir(dir, sizeof(dir)), -EPERM);
    assert_int_equal(unlink(want), 0);
    int f = open(want, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(f >= 0);
    close(f);
    assert_int_equal(usock_dir(dir, sizeof(dir)), -EPERM);
    assert_int_equal(unlink(want), 0);
    assert_int_equal(rename(moved, want), 0);
    assert_int_equal(usock_dir(dir, sizeof(dir)), 0);

    /* Without $XDG_RUNTIME_DIR (or a relative one): /tmp/umpool-UID,
     * removed again if this test made it. */
    snprintf(want, sizeof(want), "/tmp/umpool-%u", (unsigned)geteuid());
    bool made = access(want, F_OK) != 0;
    assert_int_equal(setenv("XDG_RUNTIME_DIR", "relative", 1), 0);
    int rc = usock_dir(dir, sizeof(dir));
    assert_int_equal(setenv("XDG_RUNTIME_DIR", rundir, 1), 0);
    if (made)
        rmdir(want);
    assert_int_equal(rc, 0);
    assert_string_equal(dir, want);
}

/* A live socket is not taken over, not even one whose queue is full
 * (nothing waits on it); a stale one (its process killed) is replaced; a
 * file that is no socket is left alone. Stopping removes the socket only
 * while it is the listener's own. */
static void test_stale(void **state)
{
    (void)state;
    struct usock_listener l, l2;
    int pipefd[2], c, status, q[80], nq = 0;
    char path[256], buf = 0;

    assert_int_equal(usock_listen("live", &l), 0);
    assert_int_equal(usock_listen("live", &l2), -EADDRINUSE);
    assert_int_equal(usock_connect("live", &c), 0);
    close(c);
    while (nq < 80 && usock_connect("live", &q[nq]) == 0)
        nq++;
    assert_true(nq < 80); /* the queue filled: -EAGAIN, not a wait */
    assert_int_equal(usock_connect("live", &c), -EAGAIN);
    assert_int_equal(usock_listen("live", &l2), -EADDRINUSE);
    for (int i = 0; i < nq; i++)
        close(q[i]);
    usock_unlisten(&l);
    assert_int_equal(usock_connect("live", &c), -ENOENT);

    /* l's socket taken for stale and replaced by l2: l's stop leaves l2's. */
    assert_int_equal(usock_listen("moved", &l), 0);
    close(l.fd); /* as if l's process had gone: nothing listens */
    int sp[2]; /* l's socket now: one no connection reaches */
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
                                sp), 0);
    l.fd = sp[0];
    assert_int_equal(usock_listen("moved", &l2), 0);
    usock_unlisten(&l);
    close(sp[1]);
    assert_int_equal(usock_connect("moved", &c), 0);
    close(c);
    usock_unlisten(&l2);
    assert_int_equal(usock_connect("moved", &c), -ENOENT);

    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (usock_listen("stale", &l))
            _exit(1);
        (void)!write(pipefd[1], "x", 1);
        pause();
        _exit(0);
    }
    assert_int_equal(read(pipefd[0], &buf, 1), 1);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(pipefd[0]);
    close(pipefd[1]);
    assert_int_equal(usock_connect("stale", &c), -ECONNREFUSED);
    assert_int_equal(usock_listen("stale", &l), 0);
    assert_int_equal(usock_connect("stale", &c), 0);
    close(c);
    usock_unlisten(&l);

    assert_int_equal(usock_connect("none", &c), -ENOENT);
    snprintf(path, sizeof(path), "%s/umpool/plain", rundir);
    int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(f >= 0);
    close(f);
    assert_int_equal(usock_listen("plain", &l), -EEXIST);
    assert_int_equal(access(path, F_OK), 0);
}

/* Bytes and descriptors travel together; the receiver gets new
 * descriptors of the same files (a memfd written on one side is read on
 * the other). Messages of another size, or with more descriptors than
 * asked for, are refused and leak nothing; the peer's end closed is
 * -ECONNRESET, a send to it -EPIPE. */
static void test_messages(void **state)
{
    (void)state;
    int sv[2], fds[4], got[4], n = -1;
    char msg[16] = "hello", in[16];
    int before;

    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
                                sv), 0);
    assert_int_equal(usock_peer_check(sv[0], NULL), 0);
    for (int i = 0; i < 4; i++) {
        fds[i] = memfd_create("usock-test", MFD_CLOEXEC);
        assert_true(fds[i] >= 0);
        assert_int_equal(write(fds[i], &i, sizeof(i)), (ssize_t)sizeof(i));
    }
    before = open_fds();
    assert_int_equal(usock_send(sv[0], msg, sizeof(msg), fds, 3), 0);
    assert_int_equal(usock_recv(sv[1], in, sizeof(in), got, 4, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(in, "hello");
    for (int i = 0; i < 3; i++) {
        int v = -1;
        assert_true(got[i] != fds[i]);
        assert_int_equal(pread(got[i], &v, sizeof(v), 0), (ssize_t)sizeof(v));
        assert_int_equal(v, i);
        assert_int_equal(fcntl(got[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        close(got[i]);
    }
    assert_int_equal(open_fds(), before);

    /* More descriptors than wanted; a longer and a shorter message. */
    assert_int_equal(usock_send(sv[0], msg, sizeof(msg), fds, 4), 0);
    assert_int_equal(usock_recv(sv[1], in, sizeof(in), got, 2, &n), -EPROTO);
    assert_int_equal(open_fds(), before);
    assert_int_equal(usock_send(sv[0], msg, sizeof(msg), fds, 1), 0);
    assert_int_equal(usock_recv(sv[1], in, 8, got, 4, &n), -EPROTO);
    assert_int_equal(open_fds(), before);
    assert_int_equal(usock_send(sv[0], msg, 4, fds, 2), 0);
    assert_int_equal(usock_recv(sv[1], in, sizeof(in), got, 4, &n), -EPROTO);
    assert_int_equal(open_fds(), before);
    /* No descriptors at all. */
    assert_int_equal(usock_send(sv[0], msg, sizeof(msg), NULL, 0), 0);
    assert_int_equal(usock_recv(sv[1], in, sizeof(in), got, 4, &n), 0);
    assert_int_equal(n, 0);
    /* Bad arguments. */
    assert_int_equal(usock_send(sv[0], msg, 0, NULL, 0), -EINVAL);
    assert_int_equal(usock_send(sv[0], msg, 1, NULL, 1), -EINVAL);
    assert_int_equal(usock_send(sv[0], msg, 1, fds, USOCK_MAX_FDS + 1),
                     -EINVAL);
    /* The peer gone. */
    close(sv[0]);
    assert_int_equal(usock_recv(sv[1], in, sizeof(in), got, 4, &n),
                     -ECONNRESET);
    assert_int_equal(usock_send(sv[1], msg, sizeof(msg), NULL, 0), -EPIPE);
    close(sv[1]);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

/* A process of another user is refused by usock_peer_check even where the
 * socket file is open to it (as root only: a process can change its user
 * only then; the directory's 0700 stops it before that). */
/* usock_accept: none waiting is -EAGAIN (the listener non-blocking), a
 * connection is non-blocking; usock_unlisten_unique removes the name's lock file with the socket. */
static void test_accept_unique(void **state)
{
    (void)state;
    struct usock_listener l;
    char lockpath[sizeof(l.path) + 8];
    int c, a, nfds;
    char byte = 0;
    assert_int_equal(usock_listen("uniq", &l), 0);
    snprintf(lockpath, sizeof(lockpath), "%s.lock", l.path);
    assert_int_equal(access(lockpath, F_OK), 0);
    assert_int_equal(fcntl(l.fd, F_SETFL, fcntl(l.fd, F_GETFL) | O_NONBLOCK),
                     0);
    assert_int_equal(usock_accept(&l, &a), -EAGAIN);
    assert_int_equal(usock_connect("uniq", &c), 0);
    assert_int_equal(usock_accept(&l, &a), 0);
    /* Nothing sent: the receive does not wait. */
    assert_int_equal(usock_recv(a, &byte, 1, NULL, 0, &nfds), -EAGAIN);
    assert_int_equal(usock_send(c, "x", 1, NULL, 0), 0);
    assert_int_equal(usock_recv(a, &byte, 1, NULL, 0, &nfds), 0);
    assert_int_equal(byte, 'x');
    close(a);
    close(c);
    usock_unlisten_unique(&l);
    assert_int_equal(access(l.path, F_OK), -1);
    assert_int_equal(access(lockpath, F_OK), -1);
    /* The plain stop keeps the lock file (another listener may wait on
     * it). */
    assert_int_equal(usock_listen("uniq", &l), 0);
    usock_unlisten(&l);
    assert_int_equal(access(lockpath, F_OK), 0);
}

static void test_other_user(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char dir[160], path[200];
    struct usock_listener l;
    int c, status;
    pid_t peer = 0;

    assert_int_equal(chmod(rundir, 0711), 0); /* mkdtemp's 0700 */
    snprintf(dir, sizeof(dir), "%s/open", rundir);
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(path, sizeof(path), "%s/sock", dir);
    assert_int_equal(usock_listen_path(path, &l), 0);
    int lfd = l.fd;
    assert_int_equal(chmod(path, 0666), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* its credentials are taken at connect */
        int fd;
        if (setgid(65534) || setuid(65534))
            _exit(2);
        _exit(usock_connect_path(path, &fd) ? 3 : 0);
    }
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 10000), 1); /* the child connected */
    c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(c >= 0);
    assert_int_equal(usock_peer_check(c, &peer), -EPERM);
    close(c);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* This user's own connection passes, and names its process. */
    assert_int_equal(usock_connect_path(path, &c), 0);
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(s >= 0);
    assert_int_equal(usock_peer_check(s, &peer), 0);
    assert_int_equal(peer, getpid());
    close(s);
    close(c);
    usock_unlisten(&l);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(chmod(rundir, 0700), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_dir),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_accept_unique),
        cmocka_unit_test(test_other_user),
    };
    return cmocka_run_group_tests(tests, rundir_setup, rundir_teardown);
}
