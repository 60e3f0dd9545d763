/* Scenarios of umpool-bench that live in their own files. */
#ifndef UMP_BENCH_H
#define UMP_BENCH_H

#include <stdbool.h>

/* umpool-bench placement [--json] [--topologies a,b] [--policies x,y]:
 * 0, or 1 on failure (messages printed). */
int bench_placement(const char *topologies, const char *policies, bool json);

#endif
