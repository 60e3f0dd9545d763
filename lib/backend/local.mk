# lib/backend/: the only code that talks to a driver. backend.h is the ops
# table; sim/ emulates VMM on the CPU, cuda/ drives the CUDA driver (loaded
# at run time).
# May call: topo, util.
lib_libumpool_core_la_SOURCES += \
	lib/backend/backend.h lib/backend/va_window.c lib/backend/va_window.h \
	lib/backend/sim/sim.c lib/backend/sim/sim_stream.c lib/backend/sim/sim.h \
	lib/backend/sim/sim_vmm.c lib/backend/sim/sim_vmm.h lib/backend/sim/sim_share.c \
	lib/backend/sim/sim_resv.c lib/backend/sim/sim_fail.c \
	lib/backend/sim/sim_timed.c \
	lib/backend/cuda/cuda.c lib/backend/cuda/cuda_backend.h \
	lib/backend/cuda/driver.c lib/backend/cuda/driver.h \
	lib/backend/cuda/vmm.c lib/backend/cuda/cuda_stream.c \
	lib/backend/cuda/cuda_kernel.c \
	lib/backend/cuda/cuda_topology.c
