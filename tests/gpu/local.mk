# GPU tests (owned by tests/gpu/): included from the top Makefile.am.
#
# C cmocka programs; their kernels live in gpu_kernels.cu, built by nvcc into
# one object with C launch wrappers and linked with the static CUDA runtime.
# Without nvcc the same programs link gpu_kernels_stub.c and report SKIP
# ("built without nvcc"); without a GPU they report SKIP too.
# test_gpu_enomem's whole-device test runs only with UMPOOL_GPU_FULL=1
# (scripts/gpu-check runs it alone, after make check).

GPU_TESTS = \
	tests/gpu/test_gpu_data \
	tests/gpu/test_gpu_free_async \
	tests/gpu/test_gpu_enomem \
	tests/gpu/test_gpu_peer \
	tests/gpu/test_gpu_offload \
	tests/gpu/test_gpu_coll

if HAVE_CMOCKA
check_PROGRAMS += $(GPU_TESTS)
TESTS += $(GPU_TESTS)
endif

EXTRA_DIST += tests/gpu/gpu_kernels.cu tests/gpu/gpu_kernels_stub.c \
	tests/gpu/preload_cudart.cu tests/gpu/preload_cublas.cu \
	tests/gpu/preload_torch.py tests/gpu/bindings_torch.py \
	scripts/gpu-check

GPU_TEST_HDRS = tests/gpu/gpu_kernels.h tests/gpu/gpu_util.h
GPU_TEST_CFLAGS = $(TEST_CFLAGS)

if HAVE_NVCC
# sm_90 machine code, and compute_90 PTX that newer GPUs compile at load.
# No exceptions and no thread-safe statics: the object needs no C++ runtime.
GPU_NVCCFLAGS = -O2 -std=c++17 \
	-gencode arch=compute_90,code=[sm_90,compute_90] \
	--compiler-options -fPIC,-fno-exceptions,-fno-threadsafe-statics
# The toolkit's libraries, next to its include directory (--with-cuda=DIR);
# override with make CUDA_LIBDIR=...
CUDA_LIBDIR = \
	$(patsubst -I%/include,%/lib64,$(filter -I%/include,$(CUDA_CPPFLAGS)))
GPU_KERNELS_OBJ = tests/gpu/gpu_kernels.$(OBJEXT)
GPU_KERNEL_SRC =
GPU_KERNEL_LIBS = $(GPU_KERNELS_OBJ) -L$(CUDA_LIBDIR) -lcudart_static \
	-ldl -lrt

$(GPU_KERNELS_OBJ): $(srcdir)/tests/gpu/gpu_kernels.cu \
		$(srcdir)/tests/gpu/gpu_kernels.h
	@$(MKDIR_P) tests/gpu
	$(AM_V_GEN)$(NVCC) $(GPU_NVCCFLAGS) -I$(srcdir)/tests/gpu \
		-c $(srcdir)/tests/gpu/gpu_kernels.cu -o $@

else
GPU_KERNELS_OBJ =
GPU_KERNEL_SRC = tests/gpu/gpu_kernels_stub.c
GPU_KERNEL_LIBS =
endif

GPU_TEST_LDADD = $(GPU_KERNEL_LIBS) $(TEST_LDADD)

tests_gpu_test_gpu_data_SOURCES = tests/gpu/test_gpu_data.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_data_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_data_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_data_DEPENDENCIES = $(GPU_KERNELS_OBJ)

tests_gpu_test_gpu_free_async_SOURCES = tests/gpu/test_gpu_free_async.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_free_async_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_free_async_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_free_async_DEPENDENCIES = $(GPU_KERNELS_OBJ)

tests_gpu_test_gpu_enomem_SOURCES = tests/gpu/test_gpu_enomem.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_enomem_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_enomem_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_enomem_DEPENDENCIES = $(GPU_KERNELS_OBJ)

tests_gpu_test_gpu_peer_SOURCES = tests/gpu/test_gpu_peer.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_peer_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_peer_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_peer_DEPENDENCIES = $(GPU_KERNELS_OBJ)

tests_gpu_test_gpu_offload_SOURCES = tests/gpu/test_gpu_offload.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_offload_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_offload_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_offload_DEPENDENCIES = $(GPU_KERNELS_OBJ)

tests_gpu_test_gpu_coll_SOURCES = tests/gpu/test_gpu_coll.c \
	$(GPU_KERNEL_SRC) $(GPU_TEST_HDRS)
tests_gpu_test_gpu_coll_CFLAGS = $(GPU_TEST_CFLAGS)
tests_gpu_test_gpu_coll_LDADD = $(GPU_TEST_LDADD)
EXTRA_tests_gpu_test_gpu_coll_DEPENDENCIES = $(GPU_KERNELS_OBJ)
