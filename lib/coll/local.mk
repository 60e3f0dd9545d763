# lib/coll/: collectives on pooled buffers (allreduce, broadcast, reduce,
# allgather, reduce-scatter, all-to-all, gather, scatter) across the devices
# of one pool: element types and exact reductions, the cost model and the
# algorithms, communicators.
# May call: every layer below (the pool through front's entry points).
lib_libumpool_core_la_SOURCES += \
	lib/coll/coll.h \
	lib/coll/comm.c lib/coll/comm.h \
	lib/coll/check.c lib/coll/check.h \
	lib/coll/calls.c \
	lib/coll/job.c lib/coll/job.h \
	lib/coll/algo.c \
	lib/coll/reduce.c lib/coll/reduce.h \
	lib/coll/model.c lib/coll/model.h
