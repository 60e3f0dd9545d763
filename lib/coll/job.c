#include "config.h"

#include <stdlib.h>

#include "coll/job.h"

bool coll_barrier(struct coll_job *job, int r)
{
    job->rank[r].step++;
    pthread_mutex_lock(&job->mu);
    unsigned gen = job->gen;
    if (++job->arrived == job->nl) {
        job->arrived = 0;
        if (job->x) {
            /* The other processes, while this process's ranks wait on
             * the generation (which moves only below). A job this process
             * gives up (a failed device) fails theirs at once. */
            bool go = !job->abort && !coll_job_dev_failed(job);
            pthread_mutex_unlock(&job->mu);
            bool met = go && xbar_wait(job->x->bar, (uint32_t)job->x->nproc,
                                       job->x->timeout_s);
            if (!go)
                coll_xjob_give_up(job->x, coll_job_dev_failed(job));
            pthread_mutex_lock(&job->mu);
            if (!met)
                job->abort = true;
        }
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
