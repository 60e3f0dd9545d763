/*
 * The cost model: the read bandwidth a device sees when it reads a whole
 * allocation, from where the allocation's chunks are and the links between
 * devices. Reads of local chunks run alongside remote ones; remote reads
 * share the reader's links into the device (on an NVSwitch node a GPU has
 * 450 GB/s to the switch in all, not per peer), so their times add up:
 *     t = max(local / local_bw, sum over d != reader of bytes_d / bw(reader, d))
 *     bandwidth = bytes / t
 * It is a model for ranking placements, not a prediction of a kernel's
 * speed: no contention between readers, no caches.
 */
#ifndef UMP_COSTMODEL_H
#define UMP_COSTMODEL_H

#include <stddef.h>

#include "umpool.h"

/* GB/s for reader reading chunks[d] chunks from each device d. */
double cost_read_bw(const ump_place_view_t *view, const size_t *chunks,
                    int reader);

#endif
