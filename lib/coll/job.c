#include "config.h"

#include <stdlib.h>

#include "coll/job.h"

bool coll_barrier(struct coll_job *job, int r)
{
    job->rank[r].step++;
    pthread_mutex_lock(&job->mu);
    unsigned gen = job->gen;
    if (++job->arrived == job->n) {
        job->arrived = 0;
        if (coll_job_dev_failed(job))
            job->abort = true;
        job->gen++;
        pthread_cond_broadcast(&job->cv);
    } else {
        while (job->gen == gen && !job->abort)
            pthread_cond_wait(&job->cv, &job->mu);
    }
    bool ok = !job->abort;
    pthread_mutex_unlock(&job->mu);
    return ok;
}
