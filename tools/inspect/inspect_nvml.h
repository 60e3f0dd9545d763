/*
 * umpool-inspect serve: per-GPU gauges from NVML (utilization, memory
 * utilization, temperature), next to the pools' metrics. NVML is loaded at
 * run time, never linked: where it is missing or does not start, the
 * gauges are absent from the page (no series at all) and the exporter
 * serves the pools as before.
 */
#ifndef UMP_INSPECT_NVML_H
#define UMP_INSPECT_NVML_H

#include <stdio.h>

/* The library opened when UMPOOL_NVML_LIBRARY is unset or empty. */
#define NVML_GAUGES_DEFAULT "libnvidia-ml.so.1"

struct nvml_gauges;

/* Loads NVML (UMPOOL_NVML_LIBRARY, else NVML_GAUGES_DEFAULT) and
 * initializes it. NULL when it cannot, with one line on stderr saying the
 * GPU gauges are off and why. Call once, from the thread that serves. */
struct nvml_gauges *nvml_gauges_open(void);

/* Appends the three gauge families for every GPU NVML enumerates now, in
 * the Prometheus text format; nothing for g NULL. A query that fails
 * leaves out that GPU's series (said once on stderr per query). One call
 * at a time. */
void nvml_gauges_render(struct nvml_gauges *g, FILE *out);

/* nvmlShutdown, then unloads the library; g NULL is fine. */
void nvml_gauges_close(struct nvml_gauges *g);

#endif
