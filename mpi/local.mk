# mpi/: libumpool-mpi, the MPI glue above the public API (include/umpool.h
# and the engine interface include/umpool_engine.h, never lib/ internals):
# the processes meet and move bytes on a duplicate of the caller's MPI
# communicator. Built when configure finds MPI. Included from the top
# Makefile.am; paths are relative to the top.
include_HEADERS += include/umpool_engine.h
EXTRA_DIST += umpool-mpi.pc.in include/umpool_mpi.h
if HAVE_MPI
include_HEADERS += include/umpool_mpi.h
pkgconfig_DATA += umpool-mpi.pc
lib_LTLIBRARIES += mpi/libumpool-mpi.la
endif
mpi_libumpool_mpi_la_SOURCES = mpi/umpool_mpi.c
mpi_libumpool_mpi_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
mpi_libumpool_mpi_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
mpi_libumpool_mpi_la_LIBADD = lib/libumpool.la $(MPI_LIBS)
mpi_libumpool_mpi_la_LDFLAGS = -version-info 0:0:0
