"""``serve --workers auto``: the cores this process may use (``cores.py``).

Each case builds the two files the kernel gives a process (``/proc/self/cgroup``
and ``/proc/self/mountinfo``) and the cgroup files they point at in a temporary
tree, as cgroup v1 and v2 lay them out on a host, in a container that sees its
own cgroup at the mount's root, and in one that sees the host's paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from humpyard.cli_args import worker_count
from humpyard.cores import available_cores, cgroup_cpu_quota

V2_MOUNT = "30 24 0:26 {root} {point} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_CPU_MOUNT = "31 24 0:27 {root} {point} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
V1_MEM_MOUNT = "32 24 0:28 {root} {point} rw,nosuid - cgroup cgroup rw,memory\n"
OTHER = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"


def proc(tmp: Path, cgroup: str, mountinfo: str) -> Path:
    d = tmp / "proc-self"
    d.mkdir()
    (d / "cgroup").write_text(cgroup)
    (d / "mountinfo").write_text(mountinfo)
    return d


def write(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, value in (line.split("=", 1) for line in text.split()):
        (path / name).write_text(value.replace("_", " ") + "\n")


def test_cgroup_v2_quota_is_rounded_up_and_a_parents_limit_binds(tmp_path: Path):
    fs = tmp_path / "sys-fs-cgroup"
    write(fs / "system.slice" / "app.service", "cpu.max=150000_100000")
    d = proc(tmp_path, "0::/system.slice/app.service\n",
             OTHER + V2_MOUNT.format(root="/", point=fs))
    assert cgroup_cpu_quota(d) == 2  # 1.5 cores: two workers
    write(fs / "system.slice", "cpu.max=100000_100000")
    assert cgroup_cpu_quota(d) == 1  # the parent's one core binds the child
    write(fs / "system.slice", "cpu.max=max_100000")
    write(fs / "system.slice" / "app.service", "cpu.max=max_100000")
    assert cgroup_cpu_quota(d) is None


def test_cgroup_v2_in_a_container_reads_its_own_cgroup_at_the_mount(tmp_path: Path):
    """A cgroup namespace shows the container's cgroup as ``/``; without one the path is
    the host's, under a mount whose root is that same path."""
    fs = tmp_path / "sys-fs-cgroup"
    write(fs, "cpu.max=200000_100000")
    assert cgroup_cpu_quota(proc(tmp_path, "0::/\n", V2_MOUNT.format(root="/", point=fs))) == 2
    host_path = "/kubepods/burstable/pod1/abc"
    other = tmp_path / "other"
    other.mkdir()
    d = proc(other, f"0::{host_path}\n", V2_MOUNT.format(root=host_path, point=fs))
    assert cgroup_cpu_quota(d) == 2


def test_cgroup_v1_cfs_quota_over_period(tmp_path: Path):
    fs = tmp_path / "cpu,cpuacct"
    write(fs / "docker" / "abc", "cpu.cfs_quota_us=300000 cpu.cfs_period_us=100000")
    write(fs, "cpu.cfs_quota_us=-1 cpu.cfs_period_us=100000")
    cgroup = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    mounts = (OTHER + V1_MEM_MOUNT.format(root="/", point=tmp_path / "memory")
              + V1_CPU_MOUNT.format(root="/", point=fs))
    assert cgroup_cpu_quota(proc(tmp_path, cgroup, mounts)) == 3
    # the container mounts only its own cgroup there: the host's path is that mount's root
    inner = tmp_path / "inner"
    inner.mkdir()
    write(inner / "fs", "cpu.cfs_quota_us=50000 cpu.cfs_period_us=100000")
    d = proc(inner, cgroup, V1_CPU_MOUNT.format(root="/docker/abc", point=inner / "fs"))
    assert cgroup_cpu_quota(d) == 1  # half a core is still one worker


@pytest.mark.parametrize("cgroup, files", [
    ("", ""),  # no cgroup file
    ("0::/\n", ""),  # no cpu.max (the root cgroup has none)
    ("0::/\n", "cpu.max=garbage"),
    ("0::/\n", "cpu.max=0_100000"),
    ("0::/\n", "cpu.max=100000_0"),
])
def test_no_quota_or_an_unreadable_one_sets_no_bound(tmp_path: Path, cgroup: str, files: str):
    fs = tmp_path / "fs"
    fs.mkdir()
    if files:
        write(fs, files)
    d = proc(tmp_path, cgroup, V2_MOUNT.format(root="/", point=fs))
    assert cgroup_cpu_quota(d) is None
    assert available_cores(d) == len(os.sched_getaffinity(0))


def test_a_mount_path_with_a_space_is_unescaped(tmp_path: Path):
    fs = tmp_path / "cgroup fs"
    write(fs, "cpu.max=100000_100000")
    point = str(fs).replace(" ", "\\040")
    assert cgroup_cpu_quota(proc(tmp_path, "0::/\n", V2_MOUNT.format(root="/", point=point))) == 1


def test_auto_is_the_affinity_bounded_by_the_quota(tmp_path: Path):
    fs = tmp_path / "fs"
    write(fs, "cpu.max=100000_100000")
    assert available_cores(proc(tmp_path, "0::/\n", V2_MOUNT.format(root="/", point=fs))) == 1
    write(fs, "cpu.max=100000000_100000")  # a quota of 1,000 cores: the affinity binds
    assert available_cores(tmp_path / "proc-self") == len(os.sched_getaffinity(0))
    assert worker_count("auto") == available_cores()
