#!/usr/bin/env python3
"""The suite's last test: fails, naming them, when processes that tests of
this build tree started still run.

Every test runs with RASD_TEST_TREE=<this tree's id> in its environment,
and what it starts inherits it (rasd, rasctl, workloads, shells,
Prometheus, Slurm daemons). A process that rewrote its environment escapes
this check; none of the programs the tests start does.

Usage: no_process_left.py TREE_ID [GRACE_SECONDS]
"""

import os
import sys
import time


def stat_fields(pid):
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[0], int(fields[1])


def ancestors():
    """This checker and the processes above it (ctest, make, a shell)."""
    mine = set()
    pid = os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        fields = stat_fields(pid)
        if fields is None:
            break
        pid = fields[1]
    return mine


def left_over(marker, mine):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in mine:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:  # gone, a kernel thread, or another user's
            continue
        if marker not in variables:
            continue
        fields = stat_fields(pid)
        if fields is None or fields[0] == "Z":  # ended; its parent has not reaped it yet
            continue
        found.append(pid)
    return found


def describe(pid):
    fields = stat_fields(pid)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = "?"
    parent = fields[1] if fields else "?"
    return f"  pid {pid} (parent {parent}): {command}"


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    marker = f"RASD_TEST_TREE={sys.argv[1]}".encode()
    grace = float(sys.argv[2]) if len(sys.argv) == 3 else 5.0
    mine = ancestors()
    # A process killed a moment ago may still be on its way out.
    deadline = time.monotonic() + grace
    while True:
        found = left_over(marker, mine)
        if not found:
            print("no process left")
            return 0
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    print("processes started by this tree's tests still run:")
    for pid in found:
        print(describe(pid))
    return 1


if __name__ == "__main__":
    sys.exit(main())
