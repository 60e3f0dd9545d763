# lib/tier/: tiers below device memory. Residency (segments, pins, LRU),
# backings, pinned host chunks, the NVMe store and its transfers, moves,
# eviction and the workers that run them; offload.h is what the front end
# sees (the public tier calls live in lib/front/tier_api.c).
# May call: mem, place, backend, topo, util.
lib_libumpool_core_la_SOURCES += \
	lib/tier/tier.h \
	lib/tier/offload.c lib/tier/offload.h \
	lib/tier/residency.c lib/tier/residency.h \
	lib/tier/backing.c lib/tier/backing.h \
	lib/tier/host.c lib/tier/host.h \
	lib/tier/nvme.c lib/tier/nvme.h lib/tier/nvme_io.c lib/tier/nvme_store.h \
	lib/tier/xfer.c lib/tier/xfer.h \
	lib/tier/move.c lib/tier/move.h \
	lib/tier/evict.c lib/tier/evict.h \
	lib/tier/worker.c lib/tier/worker.h \
	lib/tier/ckpt.c lib/tier/ckpt.h \
	lib/tier/suspend.c
