# The Fortran module's test (tests/fortran/test_umpool.f90), built and run
# where configure found a Fortran compiler (bindings/local.mk).
EXTRA_DIST += tests/fortran/test_umpool.f90
if HAVE_FC
check_PROGRAMS += tests/fortran/test_umpool
TESTS += tests/fortran/test_umpool
endif
tests_fortran_test_umpool_SOURCES = tests/fortran/test_umpool.f90
tests_fortran_test_umpool_LDADD = lib/libumpool.la $(FCLIBS)
tests_fortran_test_umpool_LINK = $(LINK)
# The module first: the program uses it.
tests/fortran/test_umpool.$(OBJEXT): umpool.mod
