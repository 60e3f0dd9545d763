# libumpool-preload's tests (issue 15): plain programs run under LD_PRELOAD
# by tests/preload/run.sh against the fake driver built a second time as
# libcuda (tests/libcuda.la: what the program links by name, and what the
# preload's libcuda.so.1 dependency finds). Built where cuda.h is; SKIP
# elsewhere. Included from the top Makefile.am after the plugins.
EXTRA_DIST += tests/preload/run.sh tests/preload/lsan.supp
TESTS += tests/preload/run.sh
if HAVE_CMOCKA
if HAVE_CUDA
check_LTLIBRARIES += tests/libcuda.la
check_PROGRAMS += tests/preload/test_preload_byname \
	tests/preload/test_preload_dlopen
endif
endif
tests_libcuda_la_SOURCES = tests/fake_cuda.c lib/coll/reduce.c
tests_libcuda_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_libcuda_la_LDFLAGS = $(PLUGIN_LDFLAGS) $(PTHREAD_CFLAGS)

PRELOAD_TEST_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
tests_preload_test_preload_byname_SOURCES = tests/preload/test_preload.c
tests_preload_test_preload_byname_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_preload_test_preload_byname_CFLAGS = $(PRELOAD_TEST_CFLAGS)
tests_preload_test_preload_byname_LDADD = tests/libcuda.la lib/libumpool.la \
	$(OPENMP_CFLAGS) $(PTHREAD_CFLAGS)
tests_preload_test_preload_dlopen_SOURCES = tests/preload/test_preload.c
tests_preload_test_preload_dlopen_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) \
	-DVIA_DLOPEN
tests_preload_test_preload_dlopen_CFLAGS = $(PRELOAD_TEST_CFLAGS)
tests_preload_test_preload_dlopen_LDADD = lib/libumpool.la -ldl \
	$(OPENMP_CFLAGS) $(PTHREAD_CFLAGS)
