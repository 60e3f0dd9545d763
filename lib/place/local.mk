# lib/place/: placement. Policy instances, the checks every plan passes, the
# built-in policies (top-level policies/, policies/local.mk) and plugin
# loading. A policy reads the view
# its caller gives it and never touches memory.
# May call: topo, util.
lib_libumpool_core_la_SOURCES += \
	lib/place/policy.c lib/place/policy.h \
	lib/place/builtin.h
