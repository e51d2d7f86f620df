"""What the process launcher (`mpirun` / `mpiexec`) tells this process through its environment:
how many ranks the job has and how many share this machine. Read before numpy or numba load
(runtime.configure calls `limit_threads_per_rank`; the command before numpy loads), because their thread pools take their
sizes from the environment when they start.

Without a launcher every function here answers "one process" and changes nothing.
"""
from __future__ import annotations

import os

# world size and ranks on this machine, as MPICH / Intel MPI (hydra), Open MPI and MVAPICH
# export them
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
# the thread pools N ranks on one machine must share: numba's, OpenMP's and the BLAS libraries'
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# The commands whose ranks under a launcher train one network together (train/data_parallel.py).
# Any other command would run once per rank, each writing the same files: refused (cli.run).
DATA_PARALLEL_COMMANDS = ("detector train", "classifier train")


def _int_env(names) -> int | None:
    for name in names:
        v = os.environ.get(name, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return None


def launched_ranks() -> int:
    """Ranks in the job this process belongs to (1 when no MPI launcher started it)."""
    return _int_env(SIZE_VARS) or 1


def ranks_on_this_machine() -> int:
    """Ranks of the job on this machine; when the launcher does not say, all of them."""
    return _int_env(LOCAL_SIZE_VARS) or launched_ranks()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        return os.cpu_count() or 1


def threads_per_rank() -> int:
    """This machine's cores shared out among its ranks, at least 1 each."""
    return max(1, usable_cores() // ranks_on_this_machine())


def limit_threads_per_rank():
    """Under a launcher with more than one rank, give each thread pool cores / ranks-here
    threads, unless the user set that pool's variable: N ranks of all-cores pools would run
    N x cores threads on the cores and crawl."""
    if launched_ranks() <= 1:
        return
    n = str(threads_per_rank())
    for var in THREAD_VARS:
        os.environ.setdefault(var, n)
