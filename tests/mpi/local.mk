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
# A stand-in libnccl over MPI for the NCCL path's test on the fake CUDA
# driver (tests/mpi/run.sh).
if HAVE_CMOCKA
if HAVE_MPI
check_LTLIBRARIES += tests/mpi/libfakenccl.la
endif
endif
tests_mpi_libfakenccl_la_SOURCES = tests/mpi/fake_nccl.c
tests_mpi_libfakenccl_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tests_mpi_libfakenccl_la_LDFLAGS = $(PLUGIN_LDFLAGS)
tests_mpi_libfakenccl_la_LIBADD = $(MPI_LIBS)
tests_mpi_test_mpi_coll_SOURCES = tests/mpi/test_mpi_coll.c lib/coll/reduce.c
tests_mpi_test_mpi_coll_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tests_mpi_test_mpi_coll_LDADD = mpi/libumpool-mpi.la lib/libumpool.la \
	$(MPI_LIBS)
