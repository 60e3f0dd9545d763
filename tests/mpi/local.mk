# MPI tests (issue 14): plain MPI programs, not cmocka (every process counts
# its failures, rank 0 reports), run by tests/mpi/run.sh under mpirun -np 4
# with 2 sim devices per process; SKIP where MPI or mpirun is missing. They
# link the public libraries only (libumpool-mpi reaches the pool through
# libumpool.so, so the test must not link a second, static copy of it);
# the reference reductions are reduce.c compiled in.
EXTRA_DIST += tests/mpi/run.sh tests/mpi/mpirun.sh tests/mpi/lsan.supp
TESTS += tests/mpi/run.sh
if HAVE_MPI
check_PROGRAMS += tests/mpi/test_mpi_coll
endif
tests_mpi_test_mpi_coll_SOURCES = tests/mpi/test_mpi_coll.c lib/coll/reduce.c
tests_mpi_test_mpi_coll_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_coll_LDADD = mpi/libumpool-mpi.la lib/libumpool.la \
	$(MPI_LIBS)
