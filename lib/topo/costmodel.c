#include "config.h"

#include "topo/costmodel.h"

double cost_read_bw(const ump_place_view_t *view, const size_t *chunks,
                    int reader)
{
    double total = 0, t_local = 0, t_remote = 0;
    for (int d = 0; d < view->ndev; d++) {
        if (!chunks[d])
            continue;
        double bw = view->links[reader * view->ndev + d].bandwidth_gbs;
        if (bw <= 0)
            return 0;
        total += (double)chunks[d];
        if (d == reader)
            t_local = (double)chunks[d] / bw;
        else
            t_remote += (double)chunks[d] / bw;
    }
    double t = t_local > t_remote ? t_local : t_remote;
    return t > 0 ? total / t : 0;
}
