# tools/bench/: umpool-bench, timings and a narrated demo on the public API
# only (include/umpool.h, never lib/ internals). Included from the top
# Makefile.am; paths are relative to the top. umpool-bench.c parses the
# command line and dispatches; one file per scenario (alloc, demo,
# placement, offload, replay), their output in *_report.c; the CUDA runtime and
# driver loaders of the baselines in cuda_loader.c, the io_uring/fio disk
# baseline in offload_base.c. coll under mpirun (coll_mpi.c: the processes,
# ump_comm_create_mpi, the plain MPI baseline) where configure found MPI;
# without MPI coll_mpi.c is a stub, and coll.c never sees MPI's types.
bin_PROGRAMS = tools/umpool-bench
tools_umpool_bench_SOURCES = tools/bench/umpool-bench.c tools/bench/bench.h \
	tools/bench/alloc.c tools/bench/alloc_report.c tools/bench/alloc.h \
	tools/bench/demo.c \
	tools/bench/placement.c \
	tools/bench/offload.c tools/bench/offload_base.c \
	tools/bench/offload_report.c tools/bench/offload.h \
	tools/bench/offload_opt.c tools/bench/offload_opt.h \
	tools/bench/replay.c tools/bench/replay.h tools/bench/replay_es.c \
	tools/bench/drvpace.h \
	tools/bench/preload.c tools/bench/plugin.c tools/bench/resilience.c \
	tools/bench/ipc.c tools/bench/share.c \
	tools/bench/share_coll.c tools/bench/share_coll.h \
	tools/bench/peer.c tools/bench/peer.h \
	tools/bench/coll.c tools/bench/coll_gpu.c tools/bench/coll_gpu.h \
	tools/bench/coll_mpi.c tools/bench/coll_mpi.h \
	tools/bench/cuda_loader.c tools/bench/cuda_loader.h \
	lib/topo/drivercost.c
# lib/topo/drivercost.c: the H200's measured driver costs, a pure table (no
# pool internals), compiled in as the baseline of alloc's modeled cold
# column (the physical cost of the raw sequence, not umpool's figure), of
# offload's device<->host copies on the timed sim (the model's pinned
# cuMemcpy) and of replay's model of PyTorch's expandable segments
# (replay_es.c), paced by drvpace.h like the timed sim's own calls.
tools_umpool_bench_LDADD = lib/libumpool.la $(URING_LIBS)
tools_umpool_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(URING_CFLAGS)
if HAVE_MPI
tools_umpool_bench_CPPFLAGS += $(MPI_CFLAGS)
tools_umpool_bench_LDADD += mpi/libumpool-mpi.la $(MPI_LIBS)
endif
