#!/usr/bin/env bash
# mpirun.sh — the one way piper's tests start MPI jobs: `tests/mpirun.sh N CMD ARGS...` runs
# CMD on N ranks of OpenMPI on this host. CI runs as root on 2 cores in a container, hence:
# --allow-run-as-root, --oversubscribe (more ranks than cores), --bind-to none (ranks must not be
# pinned to the same core), shared-memory and loopback transports only (no network interfaces
# to probe), one BLAS thread per rank, and LeakSanitizer suppressions for what OpenMPI itself
# leaks at exit (tests/lsan_mpi.supp; only matters in the sanitizer build).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: tests/mpirun.sh NRANKS COMMAND [ARGS...]" >&2
  exit 2
fi
n="$1"
shift
here="$(cd "$(dirname "$0")" && pwd)"
export OMPI_MCA_btl="self,vader"
# vader's single-copy mechanisms (CMA, KNEM) need ptrace rights containers rarely grant
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=ob1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export LSAN_OPTIONS="suppressions=$here/lsan_mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# the slow unwinder: OpenMPI is built without frame pointers, and the suppressions match frames
# (ompi_mpi_init, ...) that the fast one loses
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
  -x OMPI_MCA_btl -x OMPI_MCA_btl_vader_single_copy_mechanism -x OMPI_MCA_pml \
  -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x LSAN_OPTIONS -x ASAN_OPTIONS "$@"
