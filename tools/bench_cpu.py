"""Where a workload's CPU goes: the CPU time (user and system, from
``/proc``) each group of processes spent during it. A group is the
process trees of some pids (the API server and its workers, the roles, the
worker process, the benchmark's own process) or, for PostgreSQL, every
process named ``postgres`` (its backends and its background processes).

On the 2-core machine every process of a run shares the same cores, so a
workload that runs one thing at a time (A end to end: one client starting
one at a time) is as fast as the CPU it spends per task, wherever it is
spent; this says where. Linux only: elsewhere every figure is None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
POSTGRES = "postgres"  # the group of every process named so


@dataclass(frozen=True)
class _Process:
    pid: int
    parent: int
    name: str
    cpu_s: float  # its own (user and system)
    reaped_s: float  # of its children that ended and that it waited for (cutime and cstime)


def _processes() -> dict[int, _Process]:
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[int, _Process] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        # "pid (name) state ppid ... utime stime ...": the name may hold spaces and parentheses.
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        name = head.partition("(")[2]
        found[int(entry.name)] = _Process(
            int(entry.name),
            int(fields[1]),
            name,
            (int(fields[11]) + int(fields[12])) / ticks,
            (int(fields[13]) + int(fields[14])) / ticks,
        )
    return found


def _owners(processes: Mapping[int, _Process], roots: Mapping[int, str]) -> dict[int, str]:
    """Each process that descends from a root (or is one) → the group of
    its nearest root: a server started by the benchmark's process counts as
    the server, not as the benchmark."""
    owners: dict[int, str] = {}
    for pid in processes:
        seen, at = [], pid
        while at in processes and at not in roots and at not in owners and at not in seen:
            seen.append(at)
            at = processes[at].parent
        group = roots.get(at) or owners.get(at)
        if group is not None:
            owners.update(dict.fromkeys(seen, group))
            owners[at] = group
    return owners


@dataclass
class CpuMeter:
    """``groups``: name → root pids; a group is their processes and their
    descendants, each process counted in the group of its nearest root.
    ``POSTGRES`` named with no pids is every process called postgres.
    ``start()`` then ``stop()``: the CPU seconds each group spent in
    between.

    A process that ends meanwhile takes its CPU out of ``/proc``; its
    parent, once it has waited for it, holds it (``cutime``): each group is
    counted as what its processes and the children they waited for had
    spent at the stop, less what those of the start had. So PostgreSQL's
    backends that end during the run (a connection closed at its
    ``CONN_MAX_AGE``, or one per request) count through the postmaster,
    and a process that began meanwhile counts whole. A process whose parent
    is in another group counts there once it ended."""

    groups: dict[str, list[int]]
    _before: dict[int, _Process] = field(default_factory=dict)
    # pid → (its group, the CPU seconds it spent between start and stop)
    _spent: dict[int, tuple[str, float]] = field(default_factory=dict)

    @staticmethod
    def available() -> bool:
        return (PROC / "self" / "stat").exists()

    def start(self) -> None:
        self._before = _processes() if self.available() else {}

    def stop(self) -> dict[str, float | None]:
        if not self.available():
            return dict.fromkeys(self.groups)
        by_pid: dict[int, tuple[str, float]] = {}
        for sign, processes in ((-1, self._before), (1, _processes())):
            for pid, group in self._group_of(processes).items():
                _, had = by_pid.get(pid, (group, 0.0))
                by_pid[pid] = (group, had + sign * (processes[pid].cpu_s + processes[pid].reaped_s))
        self._spent = by_pid
        spent = dict.fromkeys(self.groups, 0.0)
        for group, seconds in by_pid.values():
            spent[group] += seconds
        return dict(spent)  # as dict[str, float | None]

    def busiest_share(self, group: str) -> float | None:
        """After ``stop()``: the share of ``group``'s CPU that its busiest
        process spent (1.0 when one process did all of it). For the API
        server's workers it says where the kept-alive connections landed:
        near 1 when the client's starts and the worker's polls all went to
        one of them. A process that ended meanwhile counts in the parent
        that waited for it, as in ``stop``."""
        spent = [seconds for owner, seconds in self._spent.values() if owner == group]
        total = sum(spent)
        return round(min(1.0, max(spent) / total), 2) if spent and total > 0 else None

    def _group_of(self, processes: Mapping[int, _Process]) -> dict[int, str]:
        """Each process of ``processes`` in a group → that group."""
        roots = {pid: name for name, pids in self.groups.items() for pid in pids}
        owners = _owners(processes, roots)
        if POSTGRES in self.groups and not self.groups[POSTGRES]:
            owners.update({p.pid: POSTGRES for p in processes.values() if p.name == POSTGRES})
        return owners


def per_task_ms(spent: Mapping[str, float | None], tasks: int) -> dict[str, float | None]:
    """CPU seconds by group → ms per task, with their ``total``."""
    known = [seconds for seconds in spent.values() if seconds is not None]
    figures = {name: None if s is None else round(s * 1000 / tasks, 2) for name, s in spent.items()}
    figures["total"] = round(sum(known) * 1000 / tasks, 2) if known else None
    return figures
