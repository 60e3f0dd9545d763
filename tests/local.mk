# Tests (included from the top Makefile.am). Each unit test is a small
# cmocka program linked with the convenience library, so that it reaches the
# internals of the layer it tests; exit 77 reports SKIP (no GPU here).
# Programs take LDADD and AM_CFLAGS from the top Makefile.am: a new test is
# one line in UNIT_TESTS, grouped by the layer it tests.
UNIT_TESTS = \
	tests/test_conf \
	tests/test_topology \
	tests/test_drivercost \
	tests/test_sim \
	tests/test_cuda \
	tests/test_policies \
	tests/test_sizeclass \
	tests/test_vas \
	tests/test_chunks \
	tests/test_slab \
	tests/test_pending \
	tests/test_tcache \
	tests/test_nvme \
	tests/test_offload \
	tests/test_alloc \
	tests/test_bad_input \
	tests/test_pooling \
	tests/test_stitch \
	tests/test_replay \
	tests/test_coll \
	tests/test_free_async \
	tests/test_stats \
	tests/test_fork \
	tests/test_stress \
	tests/test_coll_model \
	tests/test_coll_vtime \
	tests/test_coll_reduce

# The eviction test checks the bench's optimum (Belady's rule) too.
tests_test_offload_SOURCES = tests/test_offload.c tools/bench/offload_opt.c

# The fake driver's cuda.h.
tests_test_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)

SCRIPT_TESTS = tests/test_bench.sh tests/test_exports.sh
# Checks of the source itself (the layers, the man pages): no cmocka needed.
SOURCE_CHECKS = lib/check-layers.sh
# The allocation trace test_replay replays (scripts/gen-train-trace --preset
# small writes it).
EXTRA_DIST += tests/testutil.h $(SCRIPT_TESTS) $(SOURCE_CHECKS) \
	tests/train-small.trace
TESTS = $(SOURCE_CHECKS)
if HAVE_CMOCKA
check_PROGRAMS = $(UNIT_TESTS)
TESTS += $(UNIT_TESTS) $(SCRIPT_TESTS)
endif
