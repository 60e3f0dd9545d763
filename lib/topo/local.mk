# lib/topo/: the machine model (devices, links, NUMA), topology files and
# the pure cost model of reading memory across links.
# May call: util.
lib_libumpool_core_la_SOURCES += \
	lib/topo/topology.c lib/topo/topology.h \
	lib/topo/costmodel.c lib/topo/costmodel.h
