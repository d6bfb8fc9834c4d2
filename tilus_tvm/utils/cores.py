"""How many CPU cores this process may use (for parallel builds)."""
from __future__ import annotations

import os
from typing import Optional


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup CPU quota (a container
    on a large host sees the host's count in ``os.cpu_count()``; MetaSchedule's own default does too)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, max(1, int(quota + 0.999)))
    return max(1, cores)


def _cgroup_cpu_quota() -> Optional[float]:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), None: no limit."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
            quota = int(f.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
            period = int(f.read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None
