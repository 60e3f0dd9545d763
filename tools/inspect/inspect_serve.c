/*
 * umpool-inspect serve: the pools' statistics as a Prometheus exporter.
 *
 * HTTP is libmicrohttpd's (Debian's libmicrohttpd-dev), not a hand-written
 * parser: it reads requests, bounds them and answers malformed ones. What
 * this file adds is the policy:
 *  - one thread per connection (at most CONN_MAX at once), so a slow or
 *    silent client holds its own thread only, and is dropped after
 *    CONN_TIMEOUT_S seconds of silence;
 *  - deadlines that bytes do not reset (libmicrohttpd's timeout is one of
 *    silence only: a client sending a byte every few seconds is never
 *    dropped, and CONN_MAX of them would keep every scrape out): a
 *    request must be read whole within REQUEST_TIMEOUT_S of its accept,
 *    and a connection is over within CONN_LIFETIME_S; and when a new
 *    connection takes the last slot, the oldest one is closed, so that the
 *    next scrape finds a slot at once (see "Connection slots" below);
 *  - one request per connection (Connection: close), so that a slot is
 *    free once its answer is sent;
 *  - a request, headers included, of at most REQUEST_MAX bytes: beyond it
 *    libmicrohttpd answers an error and closes;
 *  - GET and HEAD only (405 otherwise); /metrics, and / (a page linking
 *    to it); 404 for anything else;
 *  - the page is rendered afresh for every scrape, one scrape at a time
 *    (each reads every pool's segment, a copy under its seqlock: no pool
 *    ever waits for the exporter), then, where NVML loads, each GPU's
 *    gauges (inspect_nvml.c), then the exporter's own metrics: whether
 *    every segment could be read, how many pools, how long, and the
 *    connections it cut.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inspect_nvml.h"
#include "inspect_serve.h"

#ifdef HAVE_MICROHTTPD
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <microhttpd.h>

#define CONN_MAX 128
#define CONN_TIMEOUT_S 10    /* of silence, libmicrohttpd's */
#define REQUEST_TIMEOUT_S 5  /* from accept to the request read whole */
#define CONN_LIFETIME_S 15   /* from accept to the answer sent */
#define SWEEP_MS 250         /* how often the deadlines are looked at */
#define SHED_PENDING_S 1     /* a connection cut this recently still closes */
#define REQUEST_MAX (16 * 1024)

/*
 * Connection slots. libmicrohttpd bounds a connection by its silence only,
 * and has no call to close one; so the exporter keeps its own table of the
 * connections (its notify-connection callback: STARTED on accept, CLOSED
 * before the socket is closed) and cuts one by shutdown(2) of its socket,
 * as MHD_stop_daemon does: the connection's thread wakes, reads the end
 * and closes it. A slot's fd is open for as long as the slot is used, and
 * is shut down only under conns_lock, so never once it is reused.
 *
 * Cut are: a connection whose request is not read whole REQUEST_TIMEOUT_S
 * after its accept (headers trickled a byte at a time, a silent one, a
 * body never ending), and one open CONN_LIFETIME_S (an answer read slowly),
 * by a sweep every SWEEP_MS; and, when a new connection takes the last of
 * the CONN_MAX slots, the oldest other one: a scrape is over in
 * milliseconds, so the oldest of CONN_MAX connections is a client slow to
 * send its request or to read its answer, and the next scrape finds a slot
 * at once instead of waiting in the listen backlog for a deadline. So a
 * connection is shed only once CONN_MAX - 1 others have come after it,
 * and at most one at a time: none while one cut in the last
 * SHED_PENDING_S is still closing (its slot is the next one free).
 */
enum cut_reason { CUT_REQUEST_TIMEOUT, CUT_LIFETIME, CUT_SHED, CUT_REASONS };

static const char *const cut_names[CUT_REASONS] = {
    [CUT_REQUEST_TIMEOUT] = "request_timeout",
    [CUT_LIFETIME] = "lifetime",
    [CUT_SHED] = "shed",
};

struct conn {
    bool used;
    bool answered; /* its request read whole, its answer queued */
    bool cut;      /* shut down here: closing, its slot soon free */
    MHD_socket fd; /* libmicrohttpd's, open while used */
    double start;  /* accepted, now_s() */
    double cut_at; /* now_s() when cut */
};

struct server {
    serve_render_fn render;
    void *arg;
    struct nvml_gauges *gpus; /* NULL: no NVML, no GPU gauges */
    pthread_mutex_t lock; /* one scrape at a time (the renderer's state) */
    uint64_t scrapes;     /* (lock) */
    pthread_mutex_t conns_lock; /* the slots; taken after lock, never before */
    struct conn conns[CONN_MAX];       /* (conns_lock) */
    unsigned nconns;                   /* (conns_lock) slots used */
    uint64_t cuts[CUT_REASONS];        /* (conns_lock) */
};

static const char home[] =
    "<!DOCTYPE html>\n<html><head><title>umpool exporter</title></head>\n"
    "<body><h1>umpool exporter</h1>\n<p>The statistics of every umpool "
    "pool this user may read: <a href=\"/metrics\">/metrics</a> (Prometheus "
    "text format).</p></body></html>\n";

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Closes k's connection (its thread sees the end and closes it) and counts
 * why. conns_lock held. */
static void conn_cut(struct server *s, struct conn *k, enum cut_reason why,
                     double now)
{
    shutdown(k->fd, SHUT_RDWR);
    k->cut = true;
    k->cut_at = now;
    s->cuts[why]++;
}

/* Cuts the oldest connection but fresh, unless one cut lately is still
 * closing. conns_lock held. */
static void conns_shed(struct server *s, const struct conn *fresh,
                       double now)
{
    struct conn *oldest = NULL;
    for (unsigned i = 0; i < CONN_MAX; i++) {
        struct conn *k = &s->conns[i];
        if (!k->used || k == fresh)
            continue;
        if (k->cut) {
            if (now - k->cut_at < SHED_PENDING_S)
                return;
            continue;
        }
        if (!oldest || k->start < oldest->start)
            oldest = k;
    }
    if (oldest)
        conn_cut(s, oldest, CUT_SHED, now);
}

/* Cuts the connections past their deadlines. Takes conns_lock. */
static void conns_sweep(struct server *s)
{
    pthread_mutex_lock(&s->conns_lock);
    double now = now_s();
    for (unsigned i = 0; i < CONN_MAX; i++) {
        struct conn *k = &s->conns[i];
        if (!k->used || k->cut)
            continue;
        if (!k->answered && now - k->start >= REQUEST_TIMEOUT_S)
            conn_cut(s, k, CUT_REQUEST_TIMEOUT, now);
        else if (now - k->start >= CONN_LIFETIME_S)
            conn_cut(s, k, CUT_LIFETIME, now);
    }
    pthread_mutex_unlock(&s->conns_lock);
}

/* libmicrohttpd's notify-connection callback (STARTED on the accepting
 * thread, CLOSED on the connection's own, libmicrohttpd 0.9.75): a slot from accept (STARTED) to just before the socket's close
 * (CLOSED). */
static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct server *s = cls;
    struct conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (k) {
            pthread_mutex_lock(&s->conns_lock);
            k->used = false;
            s->nconns--;
            pthread_mutex_unlock(&s->conns_lock);
        }
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    pthread_mutex_lock(&s->conns_lock);
    double now = now_s();
    for (unsigned i = 0; i < CONN_MAX && !k; i++)
        if (!s->conns[i].used)
            k = &s->conns[i];
    if (!k) {
        /* Not seen: libmicrohttpd admits CONN_MAX, each CLOSED before the
         * next STARTED can take its place. */
        shutdown(ci->connect_fd, SHUT_RDWR);
    } else {
        *k = (struct conn){.used = true, .fd = ci->connect_fd, .start = now};
        if (++s->nconns == CONN_MAX)
            conns_shed(s, k, now);
        *socket_context = k;
    }
    pthread_mutex_unlock(&s->conns_lock);
}

/* The request on c is read whole: its deadline is met. */
static void conn_answered(struct server *s, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *k = ci ? ci->socket_context : NULL;
    if (!k)
        return;
    pthread_mutex_lock(&s->conns_lock);
    k->answered = true;
    pthread_mutex_unlock(&s->conns_lock);
}

/* The /metrics page: the pools', the GPUs', then the exporter's own. NULL
 * when out of memory. */
static char *render_page(struct server *s, size_t *len_p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    pthread_mutex_lock(&s->lock);
    double t0 = now_s();
    int failed = s->render(s->arg, out);
    nvml_gauges_render(s->gpus, out);
    s->scrapes++;
    fprintf(out,
            "# HELP umpool_exporter_up 1 when every pool segment the "
            "exporter may read was read in this scrape, 0 when one could "
            "not be (its stderr says which).\n"
            "# TYPE umpool_exporter_up gauge\n"
            "umpool_exporter_up %d\n"
            "# HELP umpool_exporter_scrape_seconds Time to read the "
            "segments and render this page.\n"
            "# TYPE umpool_exporter_scrape_seconds gauge\n"
            "umpool_exporter_scrape_seconds %.6f\n"
            "# HELP umpool_exporter_scrapes_total Pages served on "
            "/metrics.\n"
            "# TYPE umpool_exporter_scrapes_total counter\n"
            "umpool_exporter_scrapes_total %llu\n",
            failed ? 0 : 1, now_s() - t0, (unsigned long long)s->scrapes);
    fprintf(out,
            "# HELP umpool_exporter_connections_cut_total Connections the "
            "exporter closed itself: request_timeout, its request not read "
            "whole %d s after its accept; lifetime, open %d s; shed, the "
            "oldest when a new one took the last of %d.\n"
            "# TYPE umpool_exporter_connections_cut_total counter\n",
            REQUEST_TIMEOUT_S, CONN_LIFETIME_S, CONN_MAX);
    pthread_mutex_lock(&s->conns_lock);
    for (int i = 0; i < CUT_REASONS; i++)
        fprintf(out,
                "umpool_exporter_connections_cut_total{reason=\"%s\"} "
                "%llu\n", cut_names[i], (unsigned long long)s->cuts[i]);
    pthread_mutex_unlock(&s->conns_lock);
    pthread_mutex_unlock(&s->lock);
    if (fclose(out)) {
        free(buf);
        return NULL;
    }
    *len_p = len;
    return buf;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, void *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    /* One request per connection: its slot is free once the answer is
     * sent, not held by a client that keeps it open for its next scrape
     * (Prometheus does) until CONN_TIMEOUT_S. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_size, void **state)
{
    (void)version;
    (void)upload_data;
    /* The first call, on the headers: answered on the second, once any
     * body has been read (and ignored). */
    if (!*state) {
        *state = c;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    conn_answered(cls, c);
    static const char text[] = "text/plain; charset=utf-8";
    if (strcmp(method, MHD_HTTP_METHOD_GET) &&
        strcmp(method, MHD_HTTP_METHOD_HEAD)) {
        static const char m[] = "only GET and HEAD\n";
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, (void *)m,
                     sizeof(m) - 1, MHD_RESPMEM_PERSISTENT);
    }
    if (!strcmp(url, "/"))
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8",
                     (void *)home, sizeof(home) - 1, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics")) {
        static const char m[] = "not found: see /metrics\n";
        return reply(c, MHD_HTTP_NOT_FOUND, text, (void *)m, sizeof(m) - 1,
                     MHD_RESPMEM_PERSISTENT);
    }
    size_t len;
    char *page = render_page(cls, &len);
    if (!page) {
        static const char m[] = "out of memory\n";
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, (void *)m,
                     sizeof(m) - 1, MHD_RESPMEM_PERSISTENT);
    }
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                 page, len, MHD_RESPMEM_MUST_FREE);
}

/* "ADDR:PORT" into addr; false (with a line on stderr) when it is not one. */
static bool parse_listen(const char *listen, struct sockaddr_in *addr)
{
    const char *colon = strrchr(listen, ':');
    char host[64];
    char *end;
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    if (colon && (size_t)(colon - listen) < sizeof(host)) {
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (colon[1] && !*end && !errno && port <= 65535 &&
            inet_pton(AF_INET, host, &addr->sin_addr) == 1) {
            addr->sin_port = htons((uint16_t)port);
            return true;
        }
    }
    fprintf(stderr, "umpool-inspect serve: --listen %s: want IPV4:PORT "
            "(e.g. 127.0.0.1:9466)\n", listen);
    return false;
}

int serve_run(const char *listen, serve_render_fn render, void *arg)
{
    struct sockaddr_in addr;
    if (!parse_listen(listen, &addr))
        return 1;
    struct server s = {.render = render, .arg = arg};
    pthread_mutex_init(&s.lock, NULL);
    pthread_mutex_init(&s.conns_lock, NULL);
    /* The signals that stop it go to sigtimedwait below: blocked before
     * libmicrohttpd's threads start, which inherit the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    /* After the mask: NVML may start threads of its own. */
    s.gpus = nvml_gauges_open();
    /* MHD_USE_ITC: without it (libmicrohttpd on Linux adds it only for
     * some options) a connection's thread ends unseen by the thread that
     * accepts, which still counts it until its next wakeup, an accept: at
     * CONN_MAX that accept is refused, closed at once, and only then the
     * finished connection is collected (127 silent clients: every other
     * scrape reset). With it, an ending thread wakes the accepting one,
     * which collects it at once and, at CONN_MAX, leaves new connections
     * in the listen backlog instead of accepting and closing them. */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
            MHD_USE_ITC, 0,
        NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_MAX,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)REQUEST_MAX,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, &s,
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "umpool-inspect serve: cannot listen on %s (in use, "
                "or not an address of this machine)\n", listen);
        nvml_gauges_close(s.gpus);
        pthread_mutex_destroy(&s.conns_lock);
        pthread_mutex_destroy(&s.lock);
        return 1;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    fprintf(stderr, "umpool-inspect serve: http://%s:%u/metrics\n", ip,
            info ? (unsigned)info->port : (unsigned)ntohs(addr.sin_port));
    /* Waiting for the signal is also the deadlines' clock. */
    const struct timespec tick = {.tv_nsec = SWEEP_MS * 1000000L};
    for (;;) {
        int sig = sigtimedwait(&stop, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM)
            break;
        conns_sweep(&s);
    }
    MHD_stop_daemon(d);
    nvml_gauges_close(s.gpus);
    pthread_mutex_destroy(&s.conns_lock);
    pthread_mutex_destroy(&s.lock);
    return 0;
}

#else /* built without libmicrohttpd */

int serve_run(const char *listen, serve_render_fn render, void *arg)
{
    (void)listen;
    (void)render;
    (void)arg;
    fprintf(stderr, "umpool-inspect serve: built without libmicrohttpd "
            "(install libmicrohttpd-dev and configure again)\n");
    return 2;
}

#endif
