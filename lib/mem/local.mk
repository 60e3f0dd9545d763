# lib/mem/: memory behind the pool's addresses. The VA manager, chunks (the
# one caller of map/unmap/set_access besides the tier backings), runs,
# slabs, size classes, deferred frees, and struct ump_pool itself.
# May call: place, backend, topo, util.
lib_libumpool_core_la_SOURCES += \
	lib/mem/pool.h lib/mem/traffic.h \
	lib/mem/sizeclass.c lib/mem/sizeclass.h \
	lib/mem/vas.c lib/mem/vas.h \
	lib/mem/chunks.c lib/mem/chunks.h lib/mem/chunks_int.h \
	lib/mem/build.c lib/mem/unshare.c \
	lib/mem/slab.c lib/mem/slab.h \
	lib/mem/runs.c lib/mem/runs.h \
	lib/mem/pending.c lib/mem/pending.h
