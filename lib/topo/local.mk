# lib/topo/: the machine model (devices, links, NUMA), topology files and
# the pure cost models: reading memory across links, and the driver's
# per-handle costs of virtual-memory calls (drivercost).
# May call: util.
lib_libumpool_core_la_SOURCES += \
	lib/topo/topology.c lib/topo/topology.h \
	lib/topo/costmodel.c lib/topo/costmodel.h \
	lib/topo/drivercost.c lib/topo/drivercost.h
