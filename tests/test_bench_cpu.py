"""Where the benchmark's CPU goes (``tools/bench_cpu.py``): real processes,
their CPU read from ``/proc``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tools.bench_cpu import CpuMeter, per_task_ms

pytestmark = pytest.mark.skipif(not CpuMeter.available(), reason="CPU time comes from /proc (Linux)")

# Code a child runs: burn(seconds) spends that much CPU.
BURNS = textwrap.dedent("""
    import sys, time
    def burn(seconds):
        began = time.process_time()
        while time.process_time() - began < seconds:
            pass
""")
# A grandchild that spends 0.3 s of CPU, says so, and lives on until its input closes.
BURN = BURNS + textwrap.dedent("""
    burn(0.3)
    print("burnt", flush=True)
    sys.stdin.read()
""")
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"


def test_a_process_trees_cpu_counts_to_the_group_of_its_nearest_root():
    meter = CpuMeter({"mine": [os.getpid()]})
    meter.start()
    child = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        # The child is this process's, but names a group of its own: its grandchild's CPU counts there.
        meter.groups["child"] = [child.pid]
        spent = meter.stop()
    finally:
        child.communicate(timeout=30)
    assert spent["child"] is not None and 0.25 <= spent["child"] < 2.0
    assert spent["mine"] is not None and spent["mine"] < 0.25  # this process only waited


# A child that spends 0.3 s of CPU, then (once told) 0.2 s more and ends;
# its parent waits for it, says so, and lives on until its input closes.
ENDING_CHILD = BURNS + textwrap.dedent("""
    burn(0.3)
    print("burnt", flush=True)
    sys.stdin.readline()
    burn(0.2)
""")
WAITING_PARENT = textwrap.dedent(f"""
    import subprocess, sys
    subprocess.run([sys.executable, "-c", {ENDING_CHILD!r}])
    print("waited", flush=True)
    sys.stdin.read()
""")


def test_a_process_that_ends_counts_through_the_parent_that_waited_for_it():
    """As PostgreSQL's backends do when a connection closes during a run:
    the CPU a process spent after the start still counts once it has ended
    (its parent holds it), and what it spent before the start does not."""
    parent = subprocess.Popen(
        [sys.executable, "-c", WAITING_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        assert parent.stdout.readline() == "burnt\n"
        meter = CpuMeter({"tree": [parent.pid]})
        meter.start()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "waited\n"
        spent = meter.stop()
    finally:
        parent.communicate(timeout=30)
    assert spent["tree"] is not None and 0.18 <= spent["tree"] < 0.3


# A child that spends the CPU its argument says, says so, and lives on until its input closes.
SPENDER = BURNS + textwrap.dedent("""
    burn(float(sys.argv[1]))
    print("burnt", flush=True)
    sys.stdin.read()
""")


def test_the_busiest_share_is_what_the_groups_busiest_process_spent():
    """How the benchmark sees where the server's kept-alive connections
    landed: one worker process busy and the others idle, or the work spread."""
    meter = CpuMeter({"server": [os.getpid()]})
    meter.start()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SPENDER, seconds], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for seconds in ("0.45", "0.15")
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        meter.stop()
    finally:
        for child in children:
            child.communicate(timeout=30)
    # The busier child's 0.45 s (and its start-up) of the group's 0.6 s and more.
    share = meter.busiest_share("server")
    assert share is not None and 0.5 < share < 0.8
    assert meter.busiest_share("nobody") is None


def test_cpu_per_task_is_in_milliseconds_with_a_total():
    assert per_task_ms({"server": 2.0, "worker": 0.5, "roles": None}, 1000) == {
        "server": 2.0,
        "worker": 0.5,
        "roles": None,
        "total": 2.5,
    }
