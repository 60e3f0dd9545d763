/*
 * What the writer (checkpoint.c) and the reader (restore.c) of checkpoint
 * files share besides the format (ckpt_format.h).
 */
#ifndef UMP_FRONT_CKPT_H
#define UMP_FRONT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "mem/pool.h"

/* The saved configuration's room: every key of the table, most of them
 * short, and a few paths. */
#define CKPT_CONFIG_MAX (6 * UMP_CONF_PATH_MAX + 4096)

/* A growing buffer (the index). */
struct ckpt_buf {
    char *p;
    size_t len, cap;
};
int ckpt_buf_put(struct ckpt_buf *b, const void *p, size_t n);

/* A place as records name it (CKPT_PLACE_* for the host places). */
int32_t ckpt_place_code(const ump_pool_t *pool, int place);
/* Test hook: the next checkpoint's store gets nvme_inject_fault(what,
 * nth) (tier/nvme.h), once; nth 0 clears. Not thread-safe. -EINVAL for a
 * negative nth or a kind too long. */
int ckpt_inject_fault(const char *what, int nth);

#endif
