"""How many cores this process may use: ``serve --workers auto``.

Two things bound it on Linux, and ``auto`` takes the smaller:

- the CPU affinity (``taskset``, ``cpuset``): ``os.sched_getaffinity``;
- the cgroup's CPU quota (``docker run --cpus 2``, a Kubernetes CPU limit, systemd's
  ``CPUQuota``), rounded up (a quota of 1.5 cores is 2 workers): cgroup v2's
  ``cpu.max``, or cgroup v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``, of
  the process's cgroup and each parent below the hierarchy's mount (a limit on a
  parent binds its children too).

A container on a 64-core host limited to 2 CPUs sees 64 cores in its affinity; one
worker per core would start 64 processes sharing two cores' time. The cgroup is found
as the kernel lists it (``/proc/self/cgroup``) under the mount that holds it
(``/proc/self/mountinfo``: its mount point and the part of the hierarchy it shows, a
container's own cgroup or the whole tree). A file that is missing or unreadable sets
no bound (no cgroup, another system).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

PROC_SELF = Path("/proc/self")


def available_cores(proc_self: Path = PROC_SELF) -> int:
    """The cores this process may use: its affinity, bounded by its cgroup's quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(proc_self)
    if quota is not None:
        cores = min(cores, quota)
    return max(1, cores)


def cgroup_cpu_quota(proc_self: Path = PROC_SELF) -> int | None:
    """The CPU quota of this process's cgroup in whole cores (rounded up), the
    smallest along its path, or None when none is set or none can be read."""
    groups = _read(proc_self / "cgroup").splitlines()
    found: list[int] = []
    for mount_root, mount_point, v2, opts in _cgroup_mounts(_read(proc_self / "mountinfo")):
        for line in groups:
            hier, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if v2 and hier == "0" and controllers == "":
                found += _quotas(mount_point, _below(path, mount_root), _v2_quota)
            elif not v2 and "cpu" in controllers.split(",") and "cpu" in opts:
                found += _quotas(mount_point, _below(path, mount_root), _v1_quota)
    return min(found) if found else None


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, Path, bool, set[str]]]:
    """(the hierarchy's part it shows, mount point, cgroup v2, super options) of every
    cgroup mount (``proc(5)``: "ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS] - TYPE
    SOURCE SUPER")."""
    mounts = []
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((_unescape(fields[3]), Path(_unescape(fields[4])),
                       tail[0] == "cgroup2", set(tail[2].split(","))))
    return mounts


def _below(path: str, mount_root: str) -> PurePosixPath:
    """The cgroup's path relative to the mount (a mount of ``/docker/abc`` shows the
    cgroup ``/docker/abc/x`` as ``x``; a cgroup outside it, as the mount's root)."""
    p, r = PurePosixPath(path), PurePosixPath(mount_root)
    try:
        return p.relative_to(r)
    except ValueError:
        return PurePosixPath(".")


def _quotas(mount_point: Path, rel: PurePosixPath,
            read_one: Callable[[Path], list[int]]) -> list[int]:
    quotas = []
    for level in [rel, *rel.parents]:
        quotas += read_one(mount_point / level)
    return quotas


def _v2_quota(cgroup: Path) -> list[int]:
    """``cpu.max``: "QUOTA PERIOD", or "max PERIOD" for none."""
    fields = _read(cgroup / "cpu.max").split()
    return _cores(fields[0], fields[1]) if len(fields) == 2 else []


def _v1_quota(cgroup: Path) -> list[int]:
    """``cpu.cfs_quota_us`` (-1 for none) over ``cpu.cfs_period_us``."""
    return _cores(_read(cgroup / "cpu.cfs_quota_us").strip(),
                  _read(cgroup / "cpu.cfs_period_us").strip())


def _cores(quota: str, period: str) -> list[int]:
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max", or nothing read
        return []
    if q <= 0 or p <= 0:
        return []
    return [max(1, math.ceil(q / p))]


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return ""
