"""The CPU cores this process may run on."""

import os


def available_cores() -> int:
    """Cores in this process's affinity mask (a SLURM job's or taskset's share), or all of them where the platform
    has no such mask."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
