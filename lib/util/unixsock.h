/*
 * Unix sockets between the processes of one user on a node, the transport
 * under a pool that other processes attach to and under IPC handles
 * (issue 32; docs/ARCHITECTURE.md): named sockets in a directory of the
 * user's own, the peer's credentials checked, and messages that carry file
 * descriptors (SCM_RIGHTS), which is how physical memory (a memfd, a CUDA
 * POSIX handle) travels between processes.
 *
 * Sockets are SOCK_SEQPACKET: one send is one message, received whole or
 * refused, so a request is never read half. Every descriptor made here is
 * close-on-exec. Errors are negative errno values, logged.
 */
#ifndef UMP_UTIL_UNIXSOCK_H
#define UMP_UTIL_UNIXSOCK_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/un.h>

/* The most descriptors one message carries. */
#define USOCK_MAX_FDS 64

/* 0 when name is a plain word: 1 to 64 letters, digits, '-' or '_'.
 * -EINVAL, logged, otherwise (a '/', a '.', a space: never a path). */
int usock_name_check(const char *name);

/* The user's socket directory into buf: $XDG_RUNTIME_DIR/umpool when that
 * is an absolute path, else /tmp/umpool-UID. Made (0700) when missing.
 * -EPERM, logged, when it is a symbolic link, not a directory, not the
 * user's, or open to others (group or other permission bits): a socket
 * there could be another user's. -ENAMETOOLONG when it does not fit. */
int usock_dir(char *buf, size_t size);

/* A listening socket and the path of its file. */
struct usock_listener {
    int fd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Listens on the socket file `path` (mode 0600). A socket file there that
 * refuses connections is stale (its process died without removing it) and
 * is replaced, and so is one whose listener's maker is gone (a child it
 * forked kept the listener); one that accepts, or whose queue of
 * connections is full, is -EADDRINUSE. */
int usock_listen_path(const char *path, struct usock_listener *l);
/* Stops listening: closes l's socket and removes its file, if the file is
 * still l's own (not a replacement another process made, having taken l's
 * for stale): a connection through it reaches l. Pending connections are
 * dropped. */
void usock_unlisten(struct usock_listener *l);
/* The same, and the name's lock file (which a name keeps, so that every
 * listener of it locks one file) goes too: for a name no other process
 * ever listens on, one made unique per listener (a random part). */
void usock_unlisten_unique(struct usock_listener *l);
/* A connection waiting on l, whose socket the caller made non-blocking
 * (-EAGAIN when none waits), with its peer checked (usock_peer_check:
 * another user's is closed, -EPERM). The connection is non-blocking too:
 * a send to a peer that stops reading is -EAGAIN at once, so that such a
 * peer cannot stall a server of many. */
int usock_accept(struct usock_listener *l, int *fd_p);
/* Connects to `path`: -ENOENT when nothing is there, -ECONNREFUSED when a
 * stale socket is, -EAGAIN when the listener's queue is full (it is not
 * accepting: never waited for). */
int usock_connect_path(const char *path, int *fd_p);
/* The same for NAME in the user's socket directory (usock_dir). */
int usock_listen(const char *name, struct usock_listener *l);
int usock_connect(const char *name, int *fd_p);

/* 0 when the process at the other end of sock runs as this process's
 * user (SO_PEERCRED, as it was when it connected); its pid into *pid_p
 * when pid_p is not NULL. -EPERM, logged, for another user. */
int usock_peer_check(int sock, pid_t *pid_p);

/* Sends len bytes (at least 1) and nfds descriptors (0 to USOCK_MAX_FDS;
 * they stay the caller's) as one message. -EPIPE when the peer is gone. */
int usock_send(int sock, const void *buf, size_t len, const int *fds,
               int nfds);
/* Receives one message of exactly len bytes and at most maxfds
 * descriptors (the caller's to close; *nfds_p how many). A message of
 * another length or with more descriptors is -EPROTO, and every
 * descriptor it brought is closed. -ECONNRESET when the peer has closed
 * its end (or died). */
int usock_recv(int sock, void *buf, size_t len, int *fds, int maxfds,
               int *nfds_p);
/* The same, waited for with no time-out as long as the process behind
 * pidfd (-1: none) lives: -ECONNRESET once it has ended with nothing
 * sent. A process that inherited the peer's socket (a child it forked)
 * keeps a connection open after the peer is gone, so the peer's life is
 * what is watched. */
int usock_recv_watched(int sock, int pidfd, void *buf, size_t len, int *fds,
                       int maxfds, int *nfds_p);
/* A pidfd (close-on-exec) of the process that made sock's other end
 * (SO_PEERCRED), or a negative errno (-ESRCH: it has ended). */
int usock_peer_pidfd(int sock);

#endif
