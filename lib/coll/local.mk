# lib/coll/: collectives on pooled buffers (allreduce, broadcast, reduce,
# allgather, reduce-scatter, all-to-all, gather, scatter) across the devices
# of one pool: element types and exact reductions, the cost model and the
# algorithms, communicators, the sim's and the GPU's execution; and across
# processes: communicators over an out-of-band channel, the hierarchical
# schedules, point-to-point, the transfers on a data engine.
# May call: every layer below (the pool through front's entry points, the
# backend's streams, events and kernel launches).
lib_libumpool_core_la_SOURCES += \
	lib/coll/coll.h \
	lib/coll/comm.c lib/coll/comm.h \
	lib/coll/check.c lib/coll/check.h \
	lib/coll/calls.c \
	lib/coll/run.c lib/coll/run.h \
	lib/coll/job.c lib/coll/job.h \
	lib/coll/algo.c lib/coll/xalgo.c \
	lib/coll/xbar.c lib/coll/xbar.h \
	lib/coll/shared.c lib/coll/shared.h \
	lib/coll/fan.c \
	lib/coll/gpu.c lib/coll/gpu.h \
	lib/coll/xgpu.c lib/coll/xgpu.h \
	lib/coll/kernel.h \
	lib/coll/reduce.c lib/coll/reduce.h \
	lib/coll/model.c lib/coll/model.h \
	lib/coll/world.c lib/coll/world.h \
	lib/coll/hier.c lib/coll/hier.h \
	lib/coll/staged.c \
	lib/coll/xchg.c \
	lib/coll/p2p.c \
	lib/coll/nccl.c lib/coll/nccl.h

# The GPU kernel (kernels.cu): nvcc makes a fatbin (sm_90 machine code,
# compute_90 and compute_80 PTX: configure's NVCC_ARCH_FLAGS), which is embedded as a byte array (kernel_image.c, made
# here, never distributed) and loaded at run time with cuModuleLoadData.
# Without nvcc, kernel_none.c says there is no image.
EXTRA_DIST += lib/coll/kernels.cu
if HAVE_NVCC
COLL_NVCCFLAGS = -O3 -std=c++17 -fmad=false -ftz=false -prec-div=true \
	$(NVCC_ARCH_FLAGS)
nodist_lib_libumpool_core_la_SOURCES = lib/coll/kernel_image.c
CLEANFILES += lib/coll/kernel_image.c lib/coll/kernels.fatbin

lib/coll/kernels.fatbin: $(srcdir)/lib/coll/kernels.cu \
		$(srcdir)/lib/coll/kernel.h $(srcdir)/lib/coll/reduce.h \
		$(srcdir)/include/umpool.h
	@$(MKDIR_P) lib/coll
	$(AM_V_GEN)$(NVCC) -fatbin $(COLL_NVCCFLAGS) -I$(srcdir)/include \
		-I$(srcdir)/lib -o $@ $(srcdir)/lib/coll/kernels.cu

# od writes the bytes; the array is aligned as the driver wants a fatbin.
lib/coll/kernel_image.c: lib/coll/kernels.fatbin
	$(AM_V_GEN){ echo '/* Generated from kernels.cu by lib/coll/local.mk */'; \
	  echo '#include "config.h"'; echo '#include "coll/kernel.h"'; \
	  echo 'static const unsigned char image[] __attribute__((aligned(64))) = {'; \
	  od -An -v -tx1 lib/coll/kernels.fatbin | \
	    sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const unsigned char *const coll_kernel_image = image;'; \
	  echo 'const size_t coll_kernel_image_size = sizeof(image);'; \
	} > $@-t && mv $@-t $@
else
lib_libumpool_core_la_SOURCES += lib/coll/kernel_none.c
endif
