# Bindings (issue 16), on the public API only, like the tools.
#
# The PyTorch and CuPy entry points, and the Fortran module's C helper, are
# part of libumpool itself (their umpool_* names are exported:
# lib/libumpool.map), so a framework loads one library.
include_HEADERS += include/umpool_bindings.h
lib_libumpool_core_la_SOURCES += bindings/torch.c bindings/cupy.c \
	bindings/fortran/hints.c

# The Python package (pure ctypes), installed where configure's Python
# looks; _install.py tells it the libdir libumpool was installed to.
UMPOOL_PY = bindings/python/umpool/__init__.py \
	bindings/python/umpool/torch.py bindings/python/umpool/cupy.py
EXTRA_DIST += $(UMPOOL_PY)
if HAVE_PYTHON
umpooldir = $(pythondir)/umpool
umpool_PYTHON = $(UMPOOL_PY)
nodist_umpool_PYTHON = bindings/python/umpool/_install.py
endif
bindings/python/umpool/_install.py: Makefile
	$(AM_V_GEN)$(MKDIR_P) bindings/python/umpool && \
	echo 'LIBDIR = "$(libdir)"' >$@
CLEANFILES += bindings/python/umpool/_install.py

# The Fortran module (bindings/fortran/umpool.f90: interfaces only, so a
# program links libumpool and nothing more). One rule compiles it, for its
# .mod (written at the top of the build tree, where Fortran programs are
# compiled, and installed beside the headers); the programs that use it
# compile after it (touched: gfortran leaves an unchanged .mod as it was).
# They link through the C compiler (libtool's C tag, the
# only one configured) with the Fortran runtime (FCLIBS).
AM_FCFLAGS = -std=f2018 -Wall
EXTRA_DIST += bindings/fortran/umpool.f90
if HAVE_FC
nodist_include_HEADERS = umpool.mod
endif
umpool.mod: $(srcdir)/bindings/fortran/umpool.f90
	$(AM_V_FC)$(MKDIR_P) bindings/fortran && \
	$(FC) $(AM_FCFLAGS) $(FCFLAGS) -c -o bindings/fortran/umpool-mod.$(OBJEXT) \
		$(srcdir)/bindings/fortran/umpool.f90 && touch $@
CLEANFILES += umpool.mod bindings/fortran/umpool-mod.$(OBJEXT)
