#!/usr/bin/env python3
"""Runs one command from a cold page cache and prints what it read from the disk.

Usage: disk_reads.py [--cache-mb N] [--drop FILE]... -- COMMAND...

Each --drop FILE is dropped from the page cache first (fsync, then posix_fadvise DONTNEED:
its pages are clean, so they go). With --cache-mb N (needs root and the cgroup v1 memory
controller, as on the H200 host and this machine) the command runs in a fresh memory
cgroup of N MiB, which bounds the page cache it can fill: a model larger than the cache,
as a 700 GB checkpoint is on any host. Prints one line, `wall_s disk_read_bytes cache_mb`
(cache_mb 0: no limit could be set, the line says so on stderr). The bytes are the
command's and its children's block input (getrusage ru_inblock, 512-byte units): what came
from the disk, not from the page cache. Exit status: the command's.
"""
import os
import subprocess
import sys
import time

CGROUP_ROOT = "/sys/fs/cgroup/memory"


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def make_cgroup(mb):
    path = os.path.join(CGROUP_ROOT, "ckpt-bench-%d" % os.getpid())
    try:
        os.mkdir(path)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(mb << 20))
        return path
    except OSError as e:
        print("disk_reads: no memory cgroup (%s): the page cache is not bounded" % e, file=sys.stderr)
        return None


def remove_cgroup(path):
    try:
        with open(os.path.join(path, "memory.force_empty"), "w") as f:
            f.write("0")
    except OSError:
        pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def main(argv):
    cache_mb, drops = 0, []
    while argv and argv[0] != "--":
        if argv[0] == "--cache-mb":
            cache_mb = int(argv[1])
            argv = argv[2:]
        elif argv[0] == "--drop":
            drops.append(argv[1])
            argv = argv[2:]
        else:
            sys.exit("disk_reads.py: unknown option " + argv[0])
    command = argv[1:]
    if not command:
        sys.exit(__doc__)
    for path in drops:
        drop(path)
    cgroup = make_cgroup(cache_mb) if cache_mb else None

    def enter():
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    t0 = time.monotonic()
    child = subprocess.Popen(command, preexec_fn=enter)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    if cgroup:
        remove_cgroup(cgroup)
    print("%.3f %d %d" % (wall, usage.ru_inblock * 512, cache_mb if cgroup else 0))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
