# preload/: libumpool-preload (issue 15), LD_PRELOAD interposition at the
# driver, above the public API (include/umpool.h, never lib/ internals).
# Built where cuda.h is (configure's HAVE_CUDA). Included from the top
# Makefile.am; paths are relative to the top.
#
# Two libraries, installed side by side: libumpool-preload.so (preloaded:
# the dlopen interposer and umpool's versions of the intercepted calls) and
# libumpool-preload-cuda.so, empty, whose dependencies are the first, then
# libcuda.so.1: what a dlopen of libcuda.so.1 returns (preload.c says why).
# Its DT_NEEDED on libcuda.so.1 comes from linking against an empty stub of
# that soname (libcuda_stub.c), built here and never installed.
EXTRA_DIST += preload/libcuda_stub.c preload/libnvml_stub.c
if HAVE_CUDA
lib_LTLIBRARIES += preload/libumpool-preload.la \
	preload/libumpool-preload-cuda.la preload/libumpool-preload-nvml.la
endif
preload_libumpool_preload_la_SOURCES = preload/preload.c preload/intercept.c \
	preload/preload.h
preload_libumpool_preload_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
preload_libumpool_preload_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
preload_libumpool_preload_la_LIBADD = lib/libumpool.la -ldl $(PTHREAD_CFLAGS)
# -shared: no static archive (one defining dlopen could interpose a
# program linked with it).
preload_libumpool_preload_la_LDFLAGS = -avoid-version -shared

preload_libumpool_preload_cuda_la_SOURCES = preload/cuda_shim.c
# In this order (cuda_shim.c says how they are kept).
preload_libumpool_preload_cuda_la_LIBADD = preload/libumpool-preload.la \
	-L$(abs_top_builddir)/preload/stub -lcuda
preload_libumpool_preload_cuda_la_LDFLAGS = -avoid-version -module -shared
preload_libumpool_preload_cuda_la_DEPENDENCIES = preload/libumpool-preload.la \
	preload/stub/libcuda.so

# The same for NVML (libnvidia-ml.so.1).
preload_libumpool_preload_nvml_la_SOURCES = preload/nvml_shim.c
preload_libumpool_preload_nvml_la_LIBADD = preload/libumpool-preload.la \
	-L$(abs_top_builddir)/preload/stub -lnvidia-ml
preload_libumpool_preload_nvml_la_LDFLAGS = -avoid-version -module -shared
preload_libumpool_preload_nvml_la_DEPENDENCIES = preload/libumpool-preload.la \
	preload/stub/libnvidia-ml.so

preload/stub/libnvidia-ml.so: $(srcdir)/preload/libnvml_stub.c
	@$(MKDIR_P) preload/stub
	$(AM_V_CC)$(CC) -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o $@ \
		$(srcdir)/preload/libnvml_stub.c
CLEANFILES += preload/stub/libnvidia-ml.so

preload/stub/libcuda.so: $(srcdir)/preload/libcuda_stub.c
	@$(MKDIR_P) preload/stub
	$(AM_V_CC)$(CC) -shared -fPIC -Wl,-soname,libcuda.so.1 -o $@ \
		$(srcdir)/preload/libcuda_stub.c
CLEANFILES += preload/stub/libcuda.so
