#!/bin/sh
# Runs the heat2d example (examples/heat2d.c) end to end: alone over the
# devices of one sim pool, and, where MPI was built and mpirun is there,
# heat2d-mpi over 4 processes of 2 sim devices each. The example checks
# itself: it exits 0 only when the distributed plate is bitwise equal to
# its serial computation and the residuals agree. Timings are not checked.
set -eu

heat=${UMPOOL_HEAT2D:-}
heat_mpi=${UMPOOL_HEAT2D_MPI:-}
mpirun=${UMPOOL_MPIRUN:-}
if [ -z "$heat" ] || [ ! -x "$heat" ]; then
    echo "SKIP: UMPOOL_HEAT2D is unset or not executable"
    exit 77
fi

fail() {
    echo "FAIL: $*"
    exit 1
}

# run WHAT CMD...: runs CMD, shows its output, fails unless it exits 0 and
# printed heat2d's result line with a bitwise match.
# result_line: the result line on stdin, without its timing (which
# differs from run to run).
result_line() {
    grep 'vs serial' | sed 's/, [0-9.]* us\/step$//'
}

run() {
    what=$1
    shift
    echo "check: $what: $*"
    rc=0
    out=$("$@" 2>&1) || rc=$?
    printf '%s\n' "$out"
    [ "$rc" -eq 0 ] || fail "$what exited $rc"
    printf '%s\n' "$out" | grep -q 'vs serial 0 (bitwise equal)' ||
        fail "$what printed no bitwise match"
}

# Rows divide evenly (64 over 2 ranks) and do not (67 over 3 and 4).
run "2 devices" "$heat" -n 64 -s 50 --config backend:sim,sim_devices:2
run "3 devices, uneven rows" "$heat" -x 64 -y 67 -s 50 -k 20 \
    --config backend:sim,sim_devices:3
run "4 devices, uneven rows" "$heat" -x 33 -y 67 -s 50 \
    --config backend:sim,sim_devices:4

echo "check: more ranks than rows is a usage error (exit 2)"
rc=0
"$heat" -x 16 -y 3 -s 5 --config backend:sim,sim_devices:4 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "3 rows over 4 ranks exited $rc, not 2"

# Kill and restart: a run checkpointing every 100 steps is killed (SIGKILL)
# once it has written step 300; restarted from its file, it must end with
# the plate and residual of a run never interrupted (the example's own
# bitwise check against the serial plate, and the same result line).
tmp=$(mktemp -d /tmp/umpool-heat2d-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
args="-n 192 -s 1500 -k 100 --config backend:sim,sim_devices:4"
# shellcheck disable=SC2086 # the options are a list of words
whole=$("$heat" $args | result_line)
echo "check: kill -9 after a checkpoint, then --restart"
# shellcheck disable=SC2086
"$heat" $args --checkpoint-every 100 --checkpoint "$tmp/h.ckpt" \
    > "$tmp/killed.out" 2>&1 &
pid=$!
n=0
until grep -q 'checkpoint at step 300' "$tmp/killed.out"; do
    kill -0 "$pid" 2>/dev/null || fail "the run ended before step 300"
    n=$((n + 1))
    [ "$n" -lt 6000 ] || fail "no checkpoint at step 300 within 300 s"
    sleep 0.05
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
cat "$tmp/killed.out"
if grep -q 'vs serial' "$tmp/killed.out"; then
    fail "the run finished before it was killed"
fi
echo "  killed (SIGKILL) after: $(grep 'checkpoint at' "$tmp/killed.out" |
    tail -1)"
# shellcheck disable=SC2086
rc=0
out=$("$heat" $args --restart "$tmp/h.ckpt" 2>&1) || rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || fail "the restart exited $rc"
printf '%s\n' "$out" | grep -q 'restarted from .* at step [3-9]00' ||
    fail "the restart did not start from the checkpoint"
again=$(printf '%s\n' "$out" | result_line)
[ "$again" = "$whole" ] ||
    fail "restarted: '$again'; uninterrupted: '$whole'"
echo "  the same result as the uninterrupted run: $whole"
# A file that is not a checkpoint: a clear refusal, not a crash.
echo "not a checkpoint" > "$tmp/bad.ckpt"
rc=0
# shellcheck disable=SC2086
"$heat" $args --restart "$tmp/bad.ckpt" > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "--restart of a bad file exited $rc, not 1"

# The Fortran version (examples/heat2d.f90), where it was built: its own
# bitwise check, and the same residuals as the C example's on the same
# plate, step by step to 7 digits (the same arithmetic in two languages).
heat_f=${UMPOOL_HEAT2D_F:-}
if [ -n "$heat_f" ] && [ -x "$heat_f" ]; then
    for args in "-n 64 -s 50 -k 10 --config backend:sim,sim_devices:2" \
        "-x 33 -y 67 -s 50 -k 10 --config backend:sim,sim_devices:4"; do
        # shellcheck disable=SC2086 # the options are a list of words
        run "Fortran, $args" "$heat_f" $args
        # shellcheck disable=SC2086
        c=$("$heat" $args | sed -n 's/.*step \([0-9]*\): residual \(.*\)/\1 \2/p')
        # shellcheck disable=SC2086
        f=$("$heat_f" $args |
            sed -n 's/.*step \([0-9]*\): residual *\(.*\)/\1 \2/p' | tr E e)
        [ "$(printf '%s\n' "$c" | wc -l)" -eq 4 ] && [ "$c" = "$f" ] ||
            fail "Fortran residuals '$f', C residuals '$c'"
        echo "  the same 4 residuals as the C example's"
    done
else
    echo "note: heat2d-f not built (no Fortran compiler): not run"
fi

if [ -z "$heat_mpi" ] || [ ! -x "$heat_mpi" ] || [ -z "$mpirun" ]; then
    echo "note: heat2d-mpi or mpirun missing: the MPI run is skipped"
    exit 0
fi
MPI_SUPP_DIR=mpi
# shellcheck source=tests/mpi/mpirun.sh
. "$(dirname "$0")/mpi/mpirun.sh"
# shellcheck disable=SC2086 # the options are a list of words
set -- $MPIRUN_OPTS -np 4
run "4 processes x 2 devices" timeout 600 "$mpirun" "$@" \
    "$heat_mpi" -n 64 -s 50 --config backend:sim,sim_devices:2
# Under MPI each process checkpoints its own pool (FILE.RANK): a run that
# checkpoints every 150 steps, then one restarted from its last file (step
# 300), each process from its own, ends with the same result line.
margs="-n 96 -s 400 -k 100 --config backend:sim,sim_devices:2"
echo "check: 2 processes, --checkpoint-every 150, then --restart"
# shellcheck disable=SC2086 # the options are a list of words
whole=$(timeout 600 "$mpirun" $MPIRUN_OPTS -np 2 "$heat_mpi" $margs \
    --checkpoint-every 150 --checkpoint "$tmp/m.ckpt" 2>&1 | result_line)
[ -n "$whole" ] || fail "the checkpointing MPI run did not finish"
[ -f "$tmp/m.ckpt.0" ] && [ -f "$tmp/m.ckpt.1" ] ||
    fail "no checkpoint file per process ($(ls "$tmp"))"
rc=0
# shellcheck disable=SC2086
out=$(timeout 600 "$mpirun" $MPIRUN_OPTS -np 2 "$heat_mpi" $margs \
    --restart "$tmp/m.ckpt" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || { printf '%s\n' "$out"; fail "the MPI restart exited $rc"; }
printf '%s\n' "$out" | grep -q 'restarted from .* at step 300' ||
    fail "the MPI restart did not start from step 300: $out"
again=$(printf '%s\n' "$out" | result_line)
[ "$again" = "$whole" ] ||
    fail "restarted: '$again'; uninterrupted: '$whole'"
echo "  restarted at step 300, the same result: $whole"
