# lib/front/: the ump_* entry points. Pool lifecycle, ump_alloc/ump_free,
# thread caches, the tier API, statistics, the model API, streams, the
# machine view, the registry of live pools and fork handling.
# May call: every layer below.
lib_libumpool_core_la_SOURCES += \
	lib/front/tcache.c lib/front/tcache.h \
	lib/front/pool.c \
	lib/front/alloc.c lib/front/count.h \
	lib/front/free.c \
	lib/front/ptrinfo.c \
	lib/front/stats.c \
	lib/front/traffic.c \
	lib/front/stream.c \
	lib/front/machine.c \
	lib/front/registry.c \
	lib/front/tier_api.c \
	lib/front/checkpoint.c lib/front/restore.c lib/front/suspend.c \
	lib/front/failure.c lib/front/failure.h \
	lib/front/ckpt.h lib/front/ckpt_format.h
lib_libumpool_core_la_SOURCES += \
	lib/front/front.h lib/front/lifecycle.h \
	lib/front/check.c lib/front/check.h \
	lib/front/registry.h \
	lib/front/stats.h lib/front/stream.h \
	lib/front/model.c
