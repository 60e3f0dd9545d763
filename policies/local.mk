# policies/: the placement layer's plug-in home (README.md there). The
# built-in policies are part of the place layer (lib/place/builtin.h) and
# compiled into the library; policies/example.c is a plug-in, built for the
# tests (tests/libpolicy_example.la, Makefile.am).
# May call: place, topo, util (as lib/place/ does).
lib_libumpool_core_la_SOURCES += \
	policies/common.c policies/local.c policies/interleave.c \
	policies/balanced.c policies/domain.c
EXTRA_DIST += policies/README.md
