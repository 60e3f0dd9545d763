# Sourced by the tests that run MPI programs (tests/mpi/run.sh,
# tests/test_heat2d.sh): sets MPIRUN_OPTS and the environment, for
#   timeout 900 "$mpirun" $MPIRUN_OPTS -np N PROGRAM ARGS
#
# Open MPI: more processes than cores (CI's machines have 2), busy-polling
# processes yield, the shared-memory transport copies without CMA, which
# containers often forbid (ptrace), and root is allowed (CI runs as root).
# Other MPIs get the plain command.
MPIRUN_OPTS=
if "$mpirun" --version 2>&1 | grep -q 'Open MPI'; then
    MPIRUN_OPTS="--oversubscribe --mca btl_vader_single_copy_mechanism none \
--mca mpi_yield_when_idle 1"
    [ "$(id -u)" -eq 0 ] && MPIRUN_OPTS="$MPIRUN_OPTS --allow-run-as-root"
fi
# Under ASan: what Open MPI and PMIx keep until exit is theirs, not
# umpool's (tests/mpi/lsan.supp). The suppressions match library names, so
# their components stay loaded to the end (unloaded, a frame is an unknown
# module) and the unwinder is the slow, exact one (their code has no frame
# pointers). Without ASan these change nothing.
OMPI_MCA_mca_base_component_disable_dlclose=1
PMIX_MCA_mca_base_component_disable_dlclose=1
ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/${MPI_SUPP_DIR:-.}/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_mca_base_component_disable_dlclose \
    PMIX_MCA_mca_base_component_disable_dlclose ASAN_OPTIONS LSAN_OPTIONS
# Open MPI forwards these to the processes it starts.
[ -n "$MPIRUN_OPTS" ] && MPIRUN_OPTS="$MPIRUN_OPTS -x ASAN_OPTIONS -x LSAN_OPTIONS"
