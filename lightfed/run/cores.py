"""The CPU cores this process may run on, and a CPU run's share of them as torch's threads."""

import math
import os
from pathlib import Path

CPU_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" in microseconds, or "max <period>"


def available_cores() -> int:
    """Cores in this process's affinity mask (a SLURM job's or taskset's share), or all of them where the platform
    has no such mask; no more than its cgroup's CPU quota allows (a container's ``--cpus``), rounded up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = CPU_QUOTA.read_text().split()
        return min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 quota here, or "max": none
        return cores


def share_cores(processes: int) -> None:
    """Gives this process, one of ``processes`` of a CPU run on this node, its share of the available cores (at
    least 1) as torch's intra-op threads, and as ``OMP_NUM_THREADS`` for the processes it starts (Fabric too leaves
    the count alone when it is set); an ``OMP_NUM_THREADS`` the user set is kept instead."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    threads = max(1, available_cores() // processes)
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
