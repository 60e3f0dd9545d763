/*
 * Slabs (lib/mem/slab.c): slab_take hands out distinct objects of one class
 * from one slab of one device, slab_put takes them back, a wholly free slab
 * beyond SLAB_EMPTY_KEEP gives its chunk back to the cached blocks and its
 * struct is kept for the next slab of its class; stale and double frees of
 * slab objects fail cleanly through ump_free; a full device spills to the
 * nearest one unless UMP_HINT_NO_SPILL.
 *
 * slab_take and slab_put run with pool->lock held, as their contract says;
 * public calls are made with it released.
 */
#include "config.h"

#include "testutil.h"

#include "mem/chunks.h"
#include "mem/pool.h"
#include "mem/slab.h"

#define CONF1 "backend:sim,sim_devices:1,sim_device_mem:64M,tcache:false"

static struct slab *slab_of(ump_pool_t *pool, const void *p)
{
    uintptr_t tag = vas_tag(&pool->vas, vas_index(&pool->vas, p));
    assert_int_equal(vas_tag_kind(tag), VAS_SLAB);
    return vas_tag_owner(tag);
}

static int tag_kind_at(ump_pool_t *pool, size_t g)
{
    return vas_tag_kind(vas_tag(&pool->vas, g));
}

/* Takes up to max objects of cls for device under the lock: rc, and the
 * count and device in *n_p, *dev_p. */
static int take(ump_pool_t *pool, int device, unsigned cls, unsigned flags,
                unsigned max, struct obj_ref *out, unsigned *n_p, int *dev_p)
{
    pthread_mutex_lock(&pool->lock);
    int rc = slab_take(pool, device, cls, flags, max, out, n_p, dev_p);
    pthread_mutex_unlock(&pool->lock);
    return rc;
}

static void put_all(ump_pool_t *pool, const struct obj_ref *objs, unsigned n)
{
    pthread_mutex_lock(&pool->lock);
    for (unsigned i = 0; i < n; i++)
        slab_put(pool, objs[i].meta, objs[i].idx);
    pthread_mutex_unlock(&pool->lock);
}

/* n objects from one slab: distinct, of its class, inside its chunk, at
 * their index, on device. */
static void check_objects(ump_pool_t *pool, const struct obj_ref *o,
                          unsigned n, unsigned cls, int device)
{
    struct slab *s = o[0].meta;
    assert_int_equal(s->cls, cls);
    assert_int_equal(s->size, sc_size(cls));
    assert_int_equal(s->device, device);
    assert_int_equal(s->nobj, pool->chunk_size / s->size);
    for (unsigned i = 0; i < n; i++) {
        assert_ptr_equal(o[i].meta, s);
        assert_true(o[i].idx < s->nobj);
        assert_ptr_equal(o[i].ptr, s->base + (size_t)o[i].idx * s->size);
        assert_ptr_equal(slab_of(pool, o[i].ptr), s);
        assert_int_equal(chunks_device(pool, vas_index(&pool->vas, o[i].ptr)),
                         device);
        for (unsigned k = 0; k < i; k++)
            assert_ptr_not_equal(o[i].ptr, o[k].ptr);
    }
}

/* Take, exhaust, put back; the second wholly free slab goes back. */
static void test_take_put_release(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const unsigned cls = sc_index(16384);
    static struct obj_ref a[256], b[256];
    unsigned na, na2, nb;
    int dev = -1;

    assert_int_equal(take(pool, 0, cls, 0, 64, a, &na, &dev), 0);
    assert_int_equal(na, 64);
    assert_int_equal(dev, 0);
    check_objects(pool, a, na, cls, 0);
    struct slab *s = a[0].meta;
    assert_int_equal(s->nobj, 128);
    assert_int_equal(s->nfree, 64);
    assert_int_equal(s->list, SLAB_PARTIAL);

    /* A take never mixes slabs: the rest of this one, then a new one. */
    assert_int_equal(take(pool, 0, cls, 0, 200, a + na, &na2, &dev), 0);
    assert_int_equal(na2, 64);
    na += na2;
    check_objects(pool, a, na, cls, 0);
    assert_int_equal(s->nfree, 0);
    assert_int_equal(s->list, SLAB_FULL);
    assert_int_equal(take(pool, 0, cls, 0, 10, b, &nb, &dev), 0);
    assert_int_equal(nb, 10);
    check_objects(pool, b, nb, cls, 0);
    struct slab *s2 = b[0].meta;
    assert_ptr_not_equal(s2, s);
    assert_ptr_not_equal(s2->base, s->base);
    for (unsigned i = 0; i < na; i++)
        for (unsigned k = 0; k < nb; k++)
            assert_ptr_not_equal(a[i].ptr, b[k].ptr);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.chunks_created, 2);
    assert_int_equal(st.mapped_bytes, 2 * TU_CHUNK);
    assert_int_equal(st.cached_bytes, 0);

    /* The first wholly free slab is kept (SLAB_EMPTY_KEEP) ... */
    const size_t g1 = s->granule, g2 = s2->granule;
    put_all(pool, a, 1);
    assert_int_equal(s->list, SLAB_PARTIAL);
    put_all(pool, a + 1, na - 1);
    assert_int_equal(s->nfree, s->nobj);
    assert_int_equal(s->list, SLAB_EMPTY);
    assert_int_equal(pool->dev[0].empty[cls].count, SLAB_EMPTY_KEEP);
    assert_int_equal(tag_kind_at(pool, g1), VAS_SLAB);
    assert_null(pool->free_slabs[cls]);
    /* ... the next one gives its chunk back, the struct is retired. */
    put_all(pool, b, nb);
    assert_int_equal(pool->dev[0].empty[cls].count, SLAB_EMPTY_KEEP);
    assert_int_equal(tag_kind_at(pool, g2), VAS_CACHED);
    assert_ptr_equal(pool->free_slabs[cls], s2);
    assert_int_equal(s2->granule, SIZE_MAX);
    st = tu_stats(pool, 0);
    assert_int_equal(st.mapped_bytes, 2 * TU_CHUNK);
    assert_int_equal(st.cached_bytes, 2 * TU_CHUNK); /* a slab, a block */
    assert_int_equal(pool->dev[0].cached, TU_CHUNK); /* the block */
    assert_int_equal(st.largest_free, TU_CHUNK);

    /* ump_trim gives both back. */
    assert_int_equal(ump_trim(pool), 0);
    st = tu_stats(pool, 0);
    assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.cached_bytes, 0);
    assert_int_equal(st.chunks_released, 2);
    assert_ptr_equal(pool->free_slabs[cls], s); /* retired too */
    tu_pool_destroy(pool);
}

/* A retired struct serves the next slab of its class only: another class
 * gets a struct of its own (on the cached chunk), its class gets it back. */
static void test_retired_reused(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1);
    const unsigned cls = sc_index(65536), other = sc_index(8192);
    static struct obj_ref a[64], b[64], c[512], d[64];
    unsigned na, nb, nc, nd;
    int dev;

    assert_int_equal(take(pool, 0, cls, 0, 64, a, &na, &dev), 0);
    assert_int_equal(na, 32); /* 2 MiB / 64 KiB */
    assert_int_equal(take(pool, 0, cls, 0, 64, b, &nb, &dev), 0);
    struct slab *s1 = a[0].meta, *s2 = b[0].meta;
    const size_t g2 = s2->granule;
    put_all(pool, a, na);
    put_all(pool, b, nb); /* s2 retired, its chunk cached */
    assert_ptr_equal(pool->free_slabs[cls], s2);

    assert_int_equal(take(pool, 0, other, 0, 512, c, &nc, &dev), 0);
    struct slab *s3 = c[0].meta;
    assert_int_equal(nc, 256);
    check_objects(pool, c, nc, other, 0);
    assert_ptr_not_equal(s3, s2);
    assert_int_equal(s3->granule, g2); /* the cached chunk, reused */
    assert_ptr_equal(pool->free_slabs[cls], s2);
    assert_null(pool->free_slabs[other]);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 2);

    /* cls: the kept empty slab first, then the retired struct. */
    assert_int_equal(take(pool, 0, cls, 0, 64, a, &na, &dev), 0);
    assert_ptr_equal(a[0].meta, s1);
    assert_int_equal(na, 32);
    assert_int_equal(take(pool, 0, cls, 0, 64, d, &nd, &dev), 0);
    assert_ptr_equal(d[0].meta, s2);
    assert_null(pool->free_slabs[cls]);
    assert_int_equal(nd, 32);
    check_objects(pool, d, nd, cls, 0);
    assert_true(s2->granule != SIZE_MAX);
    assert_true(s2->granule != g2);
    assert_int_equal(tag_kind_at(pool, s2->granule), VAS_SLAB);
    for (uint32_t i = 0; i < s2->nobj; i++) /* every word still free */
        assert_int_equal(obj_state(atomic_load(&s2->word[i])), OBJ_FREE);
    assert_int_equal(tu_stats(pool, 0).chunks_created, 3);

    put_all(pool, a, na);
    put_all(pool, c, nc);
    put_all(pool, d, nd);
    pthread_mutex_lock(&pool->lock);
    slab_trim(pool);
    pthread_mutex_unlock(&pool->lock);
    ump_stats_t st = tu_stats(pool, 0);
    assert_int_equal(st.mapped_bytes, 3 * TU_CHUNK);
    assert_int_equal(st.cached_bytes, 3 * TU_CHUNK);
    assert_int_equal(pool->dev[0].cached, 3 * TU_CHUNK); /* all blocks */
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, 0).mapped_bytes, 0);
    tu_pool_destroy(pool);
}

/* Stale and double frees of slab objects through ump_free: -EINVAL, and
 * the pool's statistics do not move; afterwards everything still frees
 * and trims to nothing. 1 MiB objects: two a slab. */
static void test_stale_double_free(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(CONF1 ",log_level:error");
    char *a = tu_alloc(pool, TU_MIB, 0), *b = tu_alloc(pool, TU_MIB, 0);
    char *c = tu_alloc(pool, TU_MIB, 0), *d = tu_alloc(pool, TU_MIB, 0);
    assert_ptr_equal(slab_of(pool, a), slab_of(pool, b));
    assert_ptr_equal(slab_of(pool, c), slab_of(pool, d));
    assert_ptr_not_equal(slab_of(pool, a), slab_of(pool, c));
    struct slab *s2 = slab_of(pool, c);
    char *lo = c < d ? c : d, *hi = c < d ? d : c;
    const size_t g2 = vas_index(&pool->vas, c);
    tu_free(pool, a);
    tu_free(pool, b); /* kept: wholly free, SLAB_EMPTY_KEEP */
    tu_free(pool, c);
    tu_free(pool, d); /* released: its chunk cached */
    assert_int_equal(tag_kind_at(pool, g2), VAS_CACHED);

    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(before.alloc_count, 4);
    assert_int_equal(before.free_count, 4);
    assert_int_equal(ump_free(pool, a), -EINVAL);  /* its slab lives */
    assert_int_equal(ump_free(pool, c), -EINVAL);  /* its slab went */
    assert_int_equal(ump_free(pool, hi), -EINVAL);
    assert_int_equal(ump_free_async(pool, b, NULL), -EINVAL);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);

    /* Interior pointers of a live object are refused. */
    char *e = tu_alloc(pool, TU_MIB, 0);
    assert_true(e == a || e == b);
    assert_int_equal(ump_free(pool, e + 256), -EINVAL);
    assert_int_equal(ump_free(pool, e + TU_MIB / 2), -EINVAL);
    assert_int_equal(tu_info(pool, e).size, TU_MIB);

    /* The released chunk becomes a slab of another class: a stale pointer
     * into it that is not a live object there is still refused. */
    char *x = tu_alloc(pool, 4096, 0);
    assert_int_equal(vas_index(&pool->vas, x), g2);
    assert_ptr_equal(x, lo); /* low addresses first */
    assert_ptr_not_equal(slab_of(pool, x), s2);
    before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_free(pool, hi), -EINVAL);
    assert_int_equal(ump_free(pool, hi + 4096), -EINVAL);
    after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    assert_int_equal(before.live_count, 2);

    tu_free(pool, x);
    tu_free(pool, e);
    assert_int_equal(ump_free(pool, x), -EINVAL);
    assert_int_equal(ump_free(pool, e), -EINVAL);
    ump_stats_t end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.alloc_count, 6);
    assert_int_equal(end.free_count, 6);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(end.live_bytes, 0);
    assert_int_equal(ump_trim(pool), 0);
    end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.mapped_bytes, 0);
    assert_int_equal(end.chunks_released, end.chunks_created);
    tu_pool_destroy(pool);
}

/* With thread caches: a second free of an object parked in the cache is
 * refused and does not park it twice. */
static void test_double_free_cached(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_devices:1,sim_device_mem:64M,log_level:error");
    void *p = tu_alloc(pool, 1000, 0);
    tu_free(pool, p);
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(ump_free(pool, p), -EINVAL);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);
    void *q = tu_alloc(pool, 1000, 0), *r = tu_alloc(pool, 1000, 0);
    assert_ptr_equal(q, p);
    assert_ptr_not_equal(r, p);
    tu_free(pool, q);
    tu_free(pool, r);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).live_count, 0);
    tu_pool_destroy(pool);
}

/* Fills device d with 2 MiB runs that may not spill. */
static int fill_device(ump_pool_t *pool, int d, void **out)
{
    ump_hints_t h = tu_hints(d);
    h.flags = UMP_HINT_NO_SPILL;
    int n = 0;
    while (ump_alloc(pool, TU_CHUNK, &h, &out[n]) == 0)
        n++;
    return n;
}

/* On a machine of two NVLink pairs (0-1, 2-3), a full device 2 spills its
 * slabs to device 3, its nearest; with UMP_HINT_NO_SPILL it fails; with
 * the pair full, to the other pair; with every device full, -ENOMEM. */
static void test_spill(void **state)
{
    (void)state;
    ump_pool_t *pool = tu_pool_create(
        "backend:sim,sim_topology:nvlink-pairs-4gpu,sim_device_mem:4M,"
        "tcache:false,log_level:error");
    assert_int_equal(ump_device_count(pool), 4);
    const unsigned cls = sc_index(3000);
    static struct obj_ref o[64], o2[64];
    void *runs[4][4] = {{0}};
    unsigned n = 0, n2 = 0;
    int dev = -1;

    assert_int_equal(fill_device(pool, 2, runs[2]), 2);
    assert_int_equal(take(pool, 2, cls, UMP_HINT_NO_SPILL, 8, o, &n, &dev),
                     -ENOMEM);
    assert_int_equal(tu_stats(pool, 3).chunks_created, 0);
    assert_int_equal(take(pool, 2, cls, 0, 8, o, &n, &dev), 0);
    assert_int_equal(dev, 3);
    assert_int_equal(n, 8);
    check_objects(pool, o, n, cls, 3);
    assert_int_equal(tu_stats(pool, 3).chunks_created, 1);
    /* A partly free slab there is used before another chunk. */
    assert_int_equal(take(pool, 2, cls, 0, 8, o2, &n2, &dev), 0);
    assert_int_equal(dev, 3);
    assert_ptr_equal(o2[0].meta, o[0].meta);
    assert_int_equal(tu_stats(pool, 3).chunks_created, 1);
    put_all(pool, o2, n2);
    /* The public call spills the same way. */
    void *p = tu_alloc(pool, 3000, 2);
    assert_int_equal(tu_info(pool, p).device, 3);
    tu_free(pool, p);
    ump_hints_t h = tu_hints(2);
    h.flags = UMP_HINT_NO_SPILL;
    assert_int_equal(ump_alloc(pool, 3000, &h, &p), -ENOMEM);

    /* Device 3 full too (the slab's chunk and one run): across the pair. */
    assert_int_equal(fill_device(pool, 3, runs[3]), 1);
    const unsigned cls2 = sc_index(20000);
    assert_int_equal(take(pool, 2, cls2, 0, 8, o2, &n2, &dev), 0);
    assert_true(dev == 0 || dev == 1);
    check_objects(pool, o2, n2, cls2, dev);
    put_all(pool, o2, n2);

    /* Everything full: -ENOMEM, and the pool unchanged. The wholly free
     * slab of cls2 that dev kept is no obstacle: a run about to fail takes
     * it back (front/pool.c pool_release_free_slabs), so the pair's four
     * chunks all become runs. */
    assert_int_equal(fill_device(pool, 0, runs[0]) +
                         fill_device(pool, 1, runs[1]), 4);
    ump_stats_t before = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(take(pool, 2, sc_index(50000), 0, 8, o2, &n2, &dev),
                     -ENOMEM);
    ump_stats_t after = tu_stats(pool, UMP_DEVICE_ALL);
    tu_assert_stats_equal(&before, &after);

    put_all(pool, o, n);
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < 4 && runs[d][i]; i++) {
            tu_free(pool, runs[d][i]);
            runs[d][i] = NULL;
        }
    ump_stats_t end = tu_stats(pool, UMP_DEVICE_ALL);
    assert_int_equal(end.live_count, 0);
    assert_int_equal(ump_trim(pool), 0);
    assert_int_equal(tu_stats(pool, UMP_DEVICE_ALL).mapped_bytes, 0);
    tu_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_put_release),
        cmocka_unit_test(test_retired_reused),
        cmocka_unit_test(test_stale_double_free),
        cmocka_unit_test(test_double_free_cached),
        cmocka_unit_test(test_spill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
