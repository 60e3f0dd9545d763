/*
 * The registry of live pools, and fork(). Before fork every pool's locks
 * are taken so the child gets consistent state; in the child, pools created
 * before the fork refuse work with -ENOTRECOVERABLE (their memory belongs to
 * the parent: on sim it is shared with it, on cuda the driver's contexts are
 * not usable in a child) and ump_pool_destroy only drops the child's copy.
 * New pools made in the child work normally.
 */
#include "config.h"

#include <string.h>

#include <pthread.h>

#include "front/registry.h"
#include "front/tcache.h"
#include "util/poll.h"

_Atomic uint64_t fork_generation;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static ump_pool_t *reg_head;

int registry_add(ump_pool_t *pool)
{
    pthread_mutex_lock(&reg_lock);
    pool->reg_next = reg_head;
    reg_head = pool;
    pthread_mutex_unlock(&reg_lock);
    return 0;
}

void registry_remove(ump_pool_t *pool)
{
    pthread_mutex_lock(&reg_lock);
    for (ump_pool_t **pp = &reg_head; *pp; pp = &(*pp)->reg_next)
        if (*pp == pool) {
            *pp = pool->reg_next;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
}

bool registry_with_pool(ump_pool_t *pool, uint64_t id,
                        void (*fn)(ump_pool_t *, void *), void *arg)
{
    bool found = false;
    pthread_mutex_lock(&reg_lock);
    /* Compare addresses first: a destroyed pool must not be dereferenced. */
    for (ump_pool_t *p = reg_head; p; p = p->reg_next)
        if (p == pool && p->id == id) {
            fn(p, arg);
            found = true;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return found;
}

void registry_for_each(void (*fn)(ump_pool_t *, void *), void *arg)
{
    pthread_mutex_lock(&reg_lock);
    for (ump_pool_t *p = reg_head; p; p = p->reg_next)
        fn(p, arg);
    pthread_mutex_unlock(&reg_lock);
}

void registry_try_for_each(void (*fn)(ump_pool_t *, void *), void *arg)
{
    if (pthread_mutex_trylock(&reg_lock))
        return;
    for (ump_pool_t *p = reg_head; p; p = p->reg_next)
        fn(p, arg);
    pthread_mutex_unlock(&reg_lock);
}

static void prefork(void)
{
    pthread_mutex_lock(&reg_lock);
    for (ump_pool_t *p = reg_head; p; p = p->reg_next) {
        pthread_mutex_lock(&p->lock);
        pthread_mutex_lock(&p->streams_lock);
        for (struct tcache *tc = p->tcaches; tc; tc = tc->next)
            tc_seize(tc);
    }
}

static void postfork_parent(void)
{
    for (ump_pool_t *p = reg_head; p; p = p->reg_next) {
        for (struct tcache *tc = p->tcaches; tc; tc = tc->next)
            tc_release(tc);
        pthread_mutex_unlock(&p->streams_lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&reg_lock);
}

static void postfork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
    /* The child's thread forgets its caches: the hot path starts from
     * them (front/check.h: pool_quiet), so an inherited pool's calls take
     * the full path, which refuses them. */
    memset(tls_slots, 0, sizeof(tls_slots));
    /* membarrier registration belongs to the address space: do it again. */
    tcache_register_membarrier();
    ump_poll_forked();
    /* The child's only thread is the one that took every lock in prefork:
     * release them as the parent does (default mutexes, so glibc does not
     * check the owner's thread id, which changed). */
    for (ump_pool_t *p = reg_head; p; p = p->reg_next) {
        for (struct tcache *tc = p->tcaches; tc; tc = tc->next)
            tc_release(tc);
        pthread_mutex_unlock(&p->streams_lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&reg_lock);
}

int fork_global_init(void)
{
    return -pthread_atfork(prefork, postfork_parent, postfork_child);
}
