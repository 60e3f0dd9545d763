/* Topology discovery on the cuda backend (to come). */
#include "config.h"

#include "cuda_api.h"

typedef int cuda_topology_placeholder;
