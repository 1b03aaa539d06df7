"""``manage.py nodeflow_bench`` and its peers: the parts that are cheap to
hold here. The percentile is the peers' (``../shared/peers/common.py``,
linear interpolation); the peers' JSON lines are read as ``run_all.sh``
reads them; the side-by-side table and the targets' ratios come from rows;
a peer without its venv is skipped, saying how to make it. Last, a smoke
run of every workload at a tiny size (PostgreSQL only, slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.procs.stack import PYTHON, ROOT, live_database_url
from tools import bench_report, peers
from tools.bench_stats import latency_summary, percentile
from tools.stack import with_database

PEERS_DIR = peers.DEFAULT_PEERS_DIR


def peers_common():
    path = PEERS_DIR / "common.py"
    if not path.exists():
        pytest.skip(f"no peer benches at {PEERS_DIR}")
    spec = importlib.util.spec_from_file_location("peers_common", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the percentile -------------------------------------------------------------
def test_the_percentile_interpolates_between_order_statistics():
    samples = [float(value) for value in range(1, 31)]  # 30 samples, 1..30
    assert percentile(samples, 50) == pytest.approx(15.5)
    # p99 of 30 lies between the two largest: 29 + 0.71 × (30 − 29).
    assert percentile(samples, 99) == pytest.approx(29.71)
    assert percentile(samples, 0) == 1 and percentile(samples, 100) == 30
    assert percentile([7.0], 99) == 7
    assert percentile([], 50) is None


def test_the_percentile_is_the_peers_own():
    common = peers_common()
    draw = random.Random(17)
    for size in (1, 2, 3, 10, 30, 31, 100):
        samples = [draw.uniform(0, 100) for _ in range(size)]
        for p in (0, 1, 50, 90, 99, 99.9, 100):
            assert percentile(samples, p) == pytest.approx(common.percentile(samples, p)), (size, p)


def test_the_latency_summary_has_the_peers_figures():
    common = peers_common()
    samples = [12.0, 15.5, 11.25, 40.0, 13.0]
    summary = latency_summary(samples)
    theirs = {metric: value for _, metric, value, _ in common.latency_metrics(samples)}
    assert summary["p50Ms"] == pytest.approx(theirs["p50_ms"], abs=0.01)
    assert summary["p99Ms"] == pytest.approx(theirs["p99_ms"], abs=0.01)
    assert summary["meanMs"] == pytest.approx(theirs["mean_ms"], abs=0.01)
    assert (summary["minMs"], summary["maxMs"], summary["runs"]) == (theirs["min_ms"], theirs["max_ms"], 5)


# --- the peers' JSON lines ------------------------------------------------------
def emitted(system: str, rows: list[tuple[str, str, float, str]]) -> dict:
    results = [
        {"system": system, "version": "1", "workload": w, "metric": m, "value": v, "unit": u} for w, m, v, u in rows
    ]
    return {"system": system, "version": "1", "settings": {"N": 2000}, "results": results}


def test_a_peers_last_json_line_is_its_figures():
    line = emitted("celery", [("B_latency", "p50_ms", 13.1, "ms")])
    output = "\n".join(
        [
            "celery worker pid 123",
            json.dumps(emitted("celery", [("B_latency", "p50_ms", 99.0, "ms")])),
            "{not json",
            json.dumps(line),
            "",
            '{"no": "results"}',
        ]
    )
    assert peers.parse_json_lines(output) == line
    assert peers.parse_json_lines("nothing here\n") is None
    assert peers.parse_json_lines("") is None


def test_a_peer_without_its_venv_is_skipped_saying_how_to_make_it(tmp_path):
    fake = tmp_path / "peers"
    fake.mkdir()
    (fake / "common.py").write_text("")
    baseline = emitted("pgbench", [("pg_update_baseline", "tps", 1234.5, "tx/s")])
    (fake / "baseline.sh").write_text(f"echo 'pgbench: running'\necho '{json.dumps(baseline)}'\n")
    lines: list[str] = []
    ran = peers.run_peers(
        admin_url="postgres://postgres@127.0.0.1:5432/postgres",
        knobs={"BENCH_N": "10"},
        out=lines.append,
        peers_dir=fake,
        venvs=str(tmp_path / "no-venvs"),
    )
    if "pgbench" in ran["skipped"]:
        assert "not found" in ran["skipped"]["pgbench"]  # no pgbench/psql on this machine
    else:
        assert ran["peers"]["pgbench"] == baseline
    assert {"celery", "procrastinate", "procrastinate_poll50ms", "dbos"} <= set(ran["skipped"])
    assert "setup_venvs.sh" in ran["skipped"]["dbos"]
    assert any("skipping dbos" in line for line in lines)


def test_the_peers_get_the_same_knobs_and_postgresql(tmp_path):
    env = peers.peer_env("postgres://bench@db.example:6543/postgres", {"BENCH_N": "100"}, tmp_path)
    assert (env["BENCH_N"], env["BENCH_PG_HOST"], env["BENCH_PG_PORT"], env["BENCH_PG_USER"]) == (
        "100",
        "db.example",
        "6543",
        "bench",
    )
    assert env["BENCH_PG_URL_BASE"] == "postgresql://bench@db.example:6543"


# --- the table and the targets --------------------------------------------------
def nodeflow_figures(*, b_prod: float, b_run: float, fork: tuple[float, float] = (4.0, 5.0)) -> dict:
    def shape(b: float, e2e: float, commits: float, dispatch: float, starts: float) -> dict:
        return {
            "aEndToEnd": {"e2eTasksPerSecond": e2e, "enqueueTasksPerSecond": e2e * 1.1, "commitsPerTask": commits},
            "aDrain": {"drainTasksPerSecond": 900.0, "upfrontEnqueueTasksPerSecond": 3000.0},
            "b": latency_summary([b - 1, b, b + 1]),
            "dispatch": latency_summary([dispatch]),
            "starts": {"oneAtATimePerSecond": starts, "bulkPerSecond": starts * 3},
            "idle": {"commitsPerSecond": 1.5},
        }

    return {
        "baselinePgbenchUpdateTps": 11000.0,
        "batched": {"tasksPerSecond": 8000.0, "baselineTpsBeforeDrain": 12000.0},
        "batchedVsBaseline": 0.667,
        "shapes": {
            "production": shape(b_prod, 1200.0, 2.2, 2.5, 1100.0),
            "makeRun": shape(b_run, 700.0, 2.6, 4.0, 800.0),
        },
        "fork": [{"items": 400, "msPerItem": fork[0]}, {"items": 6400, "msPerItem": fork[1]}],
    }


PEER_LINES = [
    emitted("celery", [("A_throughput", "e2e_tasks_per_s", 1000.0, "tasks/s"), ("B_latency", "p50_ms", 13.0, "ms")]),
    emitted(
        "procrastinate", [("A_throughput", "e2e_tasks_per_s", 800.0, "tasks/s"), ("B_latency", "p50_ms", 74.0, "ms")]
    ),
    emitted(
        "dbos",
        [
            ("A_throughput", "e2e_tasks_per_s", 240.0, "tasks/s"),
            ("B_latency", "p50_ms", 27.0, "ms"),
            ("B_latency_inprocess", "p50_ms", 17.0, "ms"),
        ],
    ),
    emitted("pgbench", [("pg_update_baseline", "tps", 12000.0, "tx/s")]),
]


def test_the_targets_are_ratios_of_this_runs_figures():
    rows = bench_report.nodeflow_rows(nodeflow_figures(b_prod=20.0, b_run=26.0)) + bench_report.peer_rows(PEER_LINES)
    found = {t.name: t for t in bench_report.targets(rows, previous_batched=7828.0, previous_batched_ratio=0.64)}
    assert found["make-run B p50 / production B p50"].value == pytest.approx(1.3)
    assert found["make-run B p50 / production B p50"].met is True
    assert found["production B p50 / DBOS queued B p50"].value == pytest.approx(20 / 27, abs=0.001)
    assert found["production B p50 / Celery B p50"].value == pytest.approx(20 / 13, abs=0.001)
    assert found["production B p50 / Celery B p50"].met is True  # ≤ 2
    assert found["dispatch p50 (production), ms"].value == 2.5
    assert found["starts/s, one at a time from 4 threads (production)"].met is True
    assert found["starts/s, bulk route (production)"].value == 3300.0
    assert found["production A e2e / DBOS A e2e"].value == pytest.approx(5.0)
    assert found["production A e2e / Procrastinate A e2e"].value == pytest.approx(1.5)
    assert found["commits per task, A e2e (production)"].met is True
    assert found["fork ms/item, 6,400 items / 400 items"].value == pytest.approx(1.25)
    assert found["batched drain / previous 7,828 tasks/s"].value == pytest.approx(8000 / 7828, abs=0.001)
    assert found["batched drain ×pgbench / previous 0.64×"].value == pytest.approx(0.667 / 0.64, abs=0.001)
    assert all(t.met is True for t in found.values()), [t.as_json() for t in found.values() if not t.met]


def test_a_target_missed_or_without_its_figures_says_so():
    rows = bench_report.nodeflow_rows(nodeflow_figures(b_prod=20.0, b_run=40.0, fork=(4.0, 23.6)))
    found = {t.name: t for t in bench_report.targets(rows)}
    assert found["make-run B p50 / production B p50"].met is False  # 2.0 > 1.5
    assert found["fork ms/item, 6,400 items / 400 items"].met is False
    # No peers in this run: their ratios are missing, not zero.
    assert found["production B p50 / DBOS queued B p50"].value is None
    assert found["production B p50 / DBOS queued B p50"].met is None
    assert not any(name.startswith("batched drain /") for name in found)
    text = bench_report.targets_table(list(found.values()))
    assert "NOT met" in text and "n/a (a figure is missing)" in text


def test_the_table_puts_every_system_side_by_side():
    rows = bench_report.nodeflow_rows(nodeflow_figures(b_prod=20.0, b_run=26.0)) + bench_report.peer_rows(PEER_LINES)
    text = bench_report.table(rows)
    header, _rule, *lines = text.splitlines()
    assert header.split() == [
        "figure",
        bench_report.PRODUCTION,
        "nodeflow(make",
        "run)",
        "celery",
        "procrastinate",
        "dbos",
        "pgbench",
    ]
    by_figure = {" ".join(line.split()[:2]): line.split()[2:] for line in lines}
    assert by_figure["A_throughput e2e_tasks_per_s"] == ["1,200", "700", "1,000", "800", "240", "–"]
    assert by_figure["B_latency p50_ms"] == ["20.0", "26.0", "13.0", "74.0", "27.0", "–"]
    assert by_figure["B_latency_inprocess p50_ms"] == ["–", "–", "–", "–", "17.0", "–"]
    assert by_figure["pg_update_baseline tps"] == ["–", "–", "–", "–", "–", "12,000"]
    assert by_figure["commits per_task_A_e2e"][:2] == ["2.20", "2.60"]
    assert by_figure["fork_dynamic ms_per_item_6400"][0] == "5.00"
    # A's rows come first, in the peers' order.
    assert lines[0].startswith("A_throughput e2e_tasks_per_s")


# --- a smoke run ----------------------------------------------------------------
@pytest.mark.slow
def test_every_workload_runs_at_a_tiny_size(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the benchmark runs the real server on PostgreSQL; it refuses SQLite")
    name = f"nodeflow_bench_test_{os.getpid()}"
    out = tmp_path / "bench.json"
    env = {
        **os.environ,
        "DATABASE_URL": live_database_url(),
        # Enough tasks that each group's CPU is some clock ticks (10 ms each):
        # the client's is about 0.3 ms a task.
        "BENCH_N": "80",
        "BENCH_B_RUNS": "2",
        "BENCH_B_WARMUP": "1",
        # Shorter than PostgreSQL's 10 s statistics flush: the commit figure is not exact here.
        "BENCH_STATS_FLUSH_S": "0.5",
        "BENCH_IDLE_WINDOW_S": "0.5",
        "BENCH_POLL_WAIT_S": "1",  # the worker's stops wait for its long-poll
    }
    args = ["--tasks", "50", "--unbatched-tasks", "0", "--latency-runs", "2", "--fork-items", "5,10"]
    args += ["--baseline-seconds", "1", "--database-name", name, "--json", str(out)]
    done = subprocess.run(
        [PYTHON, "manage.py", "nodeflow_bench", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(Path(out).read_text())
    for shape in ("production", "makeRun"):
        found = figures["shapes"][shape]
        assert found["aEndToEnd"]["e2eTasksPerSecond"] > 0 and found["aEndToEnd"]["tasks"] == 80
        cpu = found["aEndToEnd"]["cpuMsPerTask"]  # where A's CPU went: every group spent some
        assert cpu["server"] > 0 and cpu["worker"] > 0 and cpu["client"] > 0 and cpu["postgres"] > 0
        assert ("roles" in cpu) == (shape == "production")
        # make run's one process does it all; granian's master and three workers: at least a quarter.
        share = found["aEndToEnd"]["serverBusiestProcessShare"]
        assert 0.25 <= share <= 1 if shape == "production" else share == 1.0
        assert found["aDrain"]["drainTasksPerSecond"] > 0
        assert found["b"]["runs"] == 2 and found["b"]["p50Ms"] > 0
        assert found["dispatch"]["runs"] == 2
        assert found["starts"]["oneAtATimePerSecond"] > 0 and found["starts"]["bulkPerSecond"] > 0
    assert [fork["items"] for fork in figures["fork"]] == [5, 10]
    assert figures["batched"]["tasks"] == 50
    assert {target["name"] for target in figures["targets"]} >= {"make-run B p50 / production B p50"}
    assert "Every figure, side by side" in done.stdout and "Targets (issue 17)" in done.stdout
    # The run's database is dropped at the end.
    with psycopg.connect(with_database(live_database_url(), "postgres"), autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
