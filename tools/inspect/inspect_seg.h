/*
 * umpool-inspect: finding the segments pools publish, reading them safely,
 * and telling whether the process that wrote one still runs.
 */
#ifndef INSPECT_SEG_H
#define INSPECT_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "publish/snapshot.h"

enum seg_status {
    SEG_RUNNING, /* its process runs */
    SEG_EXITED,  /* no such process */
    SEG_REUSED,  /* a process runs under its pid, but a later one */
    SEG_UNKNOWN, /* written in another pid namespace: cannot tell */
};

struct seg {
    char path[512];
    bool hidden;        /* a ".umpool-..." left half made by a crash */
    uint32_t uid;       /* from the name */
    uint32_t pid_ns;
    int32_t pid;
    uint64_t pool_id;
    /* The file that was checked (scanned, then read): --clean removes
     * that file, unchanged since (ctime: an inode number may be reused),
     * or nothing. */
    dev_t dev;
    ino_t ino;
    struct timespec ctime;
    uid_t owner;
    int status;         /* enum seg_status */
    int rc;             /* 0 once view is valid, else a negative errno */
    char err[256];      /* why it could not be read */
    struct snap_view view;
    /* while mapped */
    struct snap_header *map;
    size_t len;
    bool writable;
    uint64_t seq0;
};

/* The segments named for uid in dir (SNAP_DIR unless testing) and owned
 * by uid, sorted by pid and pool; with_hidden adds half-made ones. Those
 * named for uid but owned by another user are left out: *foreign_p says
 * how many, foreign the path of one. 0 or a negative errno (err says
 * why). Free with seg_free_all. */
int seg_scan(const char *dir, uint32_t uid, bool with_hidden,
             struct seg **segs_p, size_t *n_p, size_t *foreign_p,
             char *foreign, size_t foreignlen, char *err, size_t errlen);
void seg_free_all(struct seg *segs, size_t n);

/* Reads every segment: maps them, asks each running writer for a fresh
 * snapshot (refresh), waits for the answers (at most a few hundred ms),
 * then copies and checks each. Sets rc, err, view and status (unknown for
 * writers in a pid namespace other than pid_ns, the reader's). */
void seg_load_all(struct seg *segs, size_t n, bool refresh, uint32_t pid_ns);

/* Whether list --clean may remove s: its process is known to have exited,
 * and the file is ours (uid). */
bool seg_removable(const struct seg *s, uint32_t uid);
/* Removes s's file if its name still leads to the file that was checked,
 * owned by uid: 0, -ESTALE when another file has taken the name (a new
 * process under the same pid), or a negative errno. */
int seg_remove(const struct seg *s, uint32_t uid);

/* Reads a snapshot from a file (umpool-inspect --from): 0, or a negative
 * errno with why in err. */
int seg_load_file(const char *path, struct snap_view *view_p, char *err,
                  size_t errlen);

/* Whether pid runs, and is the process that started at start (0: not
 * known). */
int seg_liveness(int32_t pid, uint64_t start);

#endif
