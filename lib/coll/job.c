#include "config.h"

#include <stdlib.h>

#include "coll/job.h"
#include "util/poll.h"

struct gen_wait {
    const struct coll_job *job;
    unsigned gen;
};

/* The barrier's release (or the job's abort), seen without the lock. */
static bool gen_moved(const void *arg)
{
    const struct gen_wait *w = arg;
    return atomic_load(&w->job->gen) != w->gen || atomic_load(&w->job->abort);
}

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
    } else if (job->gen == gen && !job->abort) {
        pthread_mutex_unlock(&job->mu);
        struct gen_wait w = {job, gen};
        ump_poll(gen_moved, &w, UMP_POLL_NS);
        pthread_mutex_lock(&job->mu);
        while (job->gen == gen && !job->abort)
            pthread_cond_wait(&job->cv, &job->mu);
    }
    bool ok = !job->abort;
    pthread_mutex_unlock(&job->mu);
    return ok;
}
