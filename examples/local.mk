# examples/: programs that show the public API in use, the way an
# application would (include/umpool.h and umpool_mpi.h only, never lib/
# internals); built, not installed. Included from the top Makefile.am;
# paths are relative to the top.
#
# heat2d: a 2D heat-diffusion solver over every device of a pool, checked
# bit for bit against the same computation done serially. heat2d-mpi is the
# same source over every device of every MPI process.
noinst_PROGRAMS += examples/heat2d
examples_heat2d_SOURCES = examples/heat2d.c
examples_heat2d_LDADD = lib/libumpool.la

if HAVE_MPI
noinst_PROGRAMS += examples/heat2d-mpi
endif
examples_heat2d_mpi_SOURCES = examples/heat2d.c
examples_heat2d_mpi_CPPFLAGS = $(AM_CPPFLAGS) -DHEAT2D_MPI $(MPI_CFLAGS)
examples_heat2d_mpi_LDADD = mpi/libumpool-mpi.la lib/libumpool.la $(MPI_LIBS)

# heat2d-f: the Fortran version (examples/heat2d.f90) on the umpool module,
# where configure found a Fortran compiler. Its own FCFLAGS give its
# objects names of their own (heat2d.c's object is examples/heat2d.o).
EXTRA_DIST += examples/heat2d.f90
if HAVE_FC
noinst_PROGRAMS += examples/heat2d-f
endif
examples_heat2d_f_SOURCES = examples/heat2d.f90
examples_heat2d_f_FCFLAGS = $(AM_FCFLAGS)
examples_heat2d_f_LDADD = lib/libumpool.la $(FCLIBS)
examples_heat2d_f_LINK = $(LINK)
examples/heat2d_f-heat2d.$(OBJEXT): umpool.mod

# Runs heat2d alone, and heat2d-mpi under mpirun where both are there
# (UMPOOL_HEAT2D, UMPOOL_HEAT2D_MPI, UMPOOL_MPIRUN from
# AM_TESTS_ENVIRONMENT). Needs no cmocka.
TESTS += tests/test_heat2d.sh
EXTRA_DIST += tests/test_heat2d.sh
