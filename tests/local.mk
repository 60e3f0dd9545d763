# Tests (included from the top Makefile.am). Each unit test is a small
# cmocka program linked with the convenience library, so that it reaches the
# internals of the layer it tests; exit 77 reports SKIP (no GPU here).
# Programs take LDADD and AM_CFLAGS from the top Makefile.am: a new test is
# one line in UNIT_TESTS, grouped by the layer it tests.
UNIT_TESTS = \
	tests/test_conf \
	tests/test_unixsock \
	tests/test_poll \
	tests/test_ipc \
	tests/test_share \
	tests/test_topology \
	tests/test_drivercost \
	tests/test_sim \
	tests/test_timed_sim \
	tests/test_cuda \
	tests/test_policies \
	tests/test_sizeclass \
	tests/test_vas \
	tests/test_chunks \
	tests/test_cold \
	tests/test_slab \
	tests/test_pending \
	tests/test_tcache \
	tests/test_nvme \
	tests/test_offload \
	tests/test_acquire_race \
	tests/test_ckpt \
	tests/test_failure \
	tests/test_alloc \
	tests/test_bad_input \
	tests/test_pooling \
	tests/test_stitch \
	tests/test_replay \
	tests/test_coll \
	tests/test_coll_shared \
	tests/test_free_async \
	tests/test_hostmem \
	tests/test_stats \
	tests/test_traffic \
	tests/test_fork \
	tests/test_stress \
	tests/test_torch_keep \
	tests/test_torch_streams \
	tests/test_coll_model \
	tests/test_coll_vtime \
	tests/test_coll_reduce \
	tests/test_coll_kernel \
	tests/test_coll_cuda

# The eviction test checks the bench's optimum (Belady's rule) too.
tests_test_offload_SOURCES = tests/test_offload.c tools/bench/offload_opt.c

# The fake driver's cuda.h.
tests_test_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_coll_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_torch_streams_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_test_coll_shared_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)

# The collectives' kernel on the host (coll_kernel_host.cu includes
# lib/coll/kernels.cu): built by nvcc as host code, linked with the static
# CUDA runtime (the object carries the kernel's device code too), run
# without a GPU. Without nvcc the test skips.
EXTRA_DIST += tests/coll_kernel_host.cu
tests_test_coll_kernel_CPPFLAGS = $(AM_CPPFLAGS) $(COLL_KERNEL_HOST_DEFS)
tests_test_coll_kernel_LDADD = $(COLL_KERNEL_HOST_LIBS) $(TEST_LDADD)
EXTRA_tests_test_coll_kernel_DEPENDENCIES = $(COLL_KERNEL_HOST_OBJ)
if HAVE_NVCC
COLL_KERNEL_HOST_OBJ = tests/coll_kernel_host.$(OBJEXT)
# The test runs the host code: PTX only for the device side (no ptxas).
COLL_HOST_NVCCFLAGS = -O2 -std=c++17 -fmad=false -ftz=false -prec-div=true \
	-gencode arch=compute_90,code=compute_90
COLL_KERNEL_HOST_DEFS = -DHAVE_KERNEL_HOST_TEST
COLL_KERNEL_HOST_LIBS = $(COLL_KERNEL_HOST_OBJ) \
	-L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt
$(COLL_KERNEL_HOST_OBJ): $(srcdir)/tests/coll_kernel_host.cu \
		$(srcdir)/lib/coll/kernels.cu $(srcdir)/lib/coll/kernel.h \
		$(srcdir)/lib/coll/reduce.h
	@$(MKDIR_P) tests
	$(AM_V_GEN)$(NVCC) $(COLL_HOST_NVCCFLAGS) -I$(srcdir)/include \
		-I$(srcdir)/lib -I. --compiler-options \
		-fPIC,-fno-exceptions,-fno-threadsafe-statics \
		-c $(srcdir)/tests/coll_kernel_host.cu -o $@
CLEANFILES += $(COLL_KERNEL_HOST_OBJ)
endif

SCRIPT_TESTS = tests/test_bench.sh tests/test_bench_cold.sh tests/test_bench_offload.sh \
	tests/test_bench_replay.sh tests/test_bench_coll.sh tests/test_exports.sh \
	tests/test_hot_path.sh
# Checks of the source itself (the layers, the man pages): no cmocka needed.
SOURCE_CHECKS = lib/check-layers.sh
# The allocation trace test_replay replays (scripts/gen-train-trace --preset
# small writes it).
EXTRA_DIST += tests/plaintest.h tests/fdcount.h tests/rundir.h tests/testutil.h tests/coll_call.h tests/coll_cases.h tests/fakecuda_util.h $(SCRIPT_TESTS) $(SOURCE_CHECKS) \
	tests/train-small.trace
TESTS = $(SOURCE_CHECKS)
check_PROGRAMS =
if HAVE_CMOCKA
check_PROGRAMS += $(UNIT_TESTS) tests/hot_pair
TESTS += $(UNIT_TESTS) $(SCRIPT_TESTS)
endif

# The hot path's instruction count (tests/test_hot_path.sh): the shared
# library, as programs link it; -no-install: a real executable, not
# libtool's wrapper script, runs under valgrind.
tests_hot_pair_SOURCES = tests/hot_pair.c
tests_hot_pair_LDADD = lib/libumpool.la
tests_hot_pair_LDFLAGS = -no-install
