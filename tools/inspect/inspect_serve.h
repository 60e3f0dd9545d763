/*
 * umpool-inspect serve: an HTTP/1.1 exporter of the pools' statistics in
 * the Prometheus text format (inspect_serve.c, on libmicrohttpd). The tool
 * renders the page; this file only serves it.
 */
#ifndef UMP_INSPECT_SERVE_H
#define UMP_INSPECT_SERVE_H

#include <stdio.h>

/* Writes the /metrics page to out; 0, or nonzero when a segment the
 * exporter may read could not be read (the page is served all the same,
 * and says so). Called by one scrape at a time. */
typedef int (*serve_render_fn)(void *arg, FILE *out);

/* Serves /metrics (render's page, with the exporter's own metrics after
 * it) and / (a short page linking to it) on listen ("ADDR:PORT", IPv4;
 * port 0: one the kernel picks), until SIGINT or SIGTERM. Prints the
 * address it serves on, one line on stderr. 0 on a clean stop, 1 when it
 * cannot serve (a bad address, a port in use: one line on stderr), 2
 * when built without libmicrohttpd. */
int serve_run(const char *listen, serve_render_fn render, void *arg);

#endif
