"""``manage.py nodeflow_bench``: Node Flow's throughput, latency and commit
figures in two shapes (production, ``make run``), the peers' workloads A
and B, the wide fork, with a pgbench baseline from the same run; with
``--peers``, the peers' own benches too, side by side, and the targets'
ratios. PostgreSQL only (see tools/bench.py)."""

import os

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from tools import bench_report, peers
from tools import bench_workloads as workloads
from tools.bench import Bench, write_json
from tools.stack import live_database_url, with_database

SHAPE_OPTIONS = {"production": "production", "make-run": "makeRun"}


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--fork-items takes sizes separated by commas, not {text!r}") from exc
    if any(size < 1 for size in sizes):
        raise CommandError("--fork-items sizes must be at least 1")
    return sizes


def parse_shapes(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in SHAPE_OPTIONS]
    if unknown or not names:
        raise CommandError(f"--shapes takes production and/or make-run, not {text!r}")
    return [SHAPE_OPTIONS[name] for name in names]


class Command(BaseCommand):
    help = (
        "Benchmark Node Flow (production and make-run shapes) against a pgbench baseline and, with --peers, its peers."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tasks", type=int, default=12000, help="tasks for (a), the batched drain (0: skip)")
        parser.add_argument("--unbatched-tasks", type=int, default=1500, help="tasks for (b) (0: skip)")
        parser.add_argument("--latency-runs", type=int, default=100, help="runs of (c), (c') and dispatch")
        parser.add_argument(
            "--fork-items", default="400,6400", help="FORK_JOIN_DYNAMIC sizes, comma-separated ('' : skip)"
        )
        parser.add_argument("--shapes", default="production,make-run", help="production and/or make-run")
        parser.add_argument(
            "--observe",
            choices=["sql", "api"],
            default=None,
            help="how the client sees completions: a count query (default, env BENCH_OBSERVE) or the public routes",
        )
        parser.add_argument(
            "--database-name", default=None, help="the throw-away database (default nodeflow_bench_<pid>)"
        )
        parser.add_argument("--keep-database", action="store_true", help="do not drop it at the end")
        parser.add_argument("--peers", action="store_true", help="run the peers' benches too (../shared/peers)")
        parser.add_argument("--peers-prefect", action="store_true", help="with --peers, Prefect too (slow)")
        parser.add_argument(
            "--peers-dir", default=None, help="the peers' benches (default ../shared/peers, env PEERS_DIR)"
        )
        parser.add_argument(
            "--previous-batched", type=float, default=None, help="an earlier (a) figure, tasks/s, to compare with"
        )
        parser.add_argument(
            "--previous-batched-ratio",
            type=float,
            default=None,
            help="an earlier (a) ratio to pgbench, to compare with",
        )
        parser.add_argument("--baseline-seconds", type=int, default=10, help="how long each pgbench baseline runs")
        parser.add_argument("--json", default="bench-results.json", help="where to write the figures")

    def handle(self, *args, **options) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("the benchmark needs PostgreSQL: set DATABASE_URL=postgres://…")
        observe = options["observe"] or os.environ.get("BENCH_OBSERVE", "sql")
        if observe not in ("sql", "api"):
            raise CommandError(f"BENCH_OBSERVE must be sql or api, not {observe!r}")
        admin_url = with_database(live_database_url(), "postgres")
        bench = Bench(
            admin_url=admin_url,
            tasks=options["tasks"],
            unbatched_tasks=options["unbatched_tasks"],
            latency_runs=options["latency_runs"],
            fork_items=parse_sizes(options["fork_items"]),
            shapes=parse_shapes(options["shapes"]),
            database_name=options["database_name"],
            keep_database=options["keep_database"],
            observe=observe,
            baseline_seconds=options["baseline_seconds"],
            out=self.stdout.write,
        )
        figures = bench.run()
        rows = bench_report.nodeflow_rows(figures)
        if options["peers"]:
            # With the Node Flow stack stopped: bench.run() has stopped every process it started.
            knobs = {
                "BENCH_N": str(workloads.N_TASKS),
                "BENCH_WORKERS": str(workloads.WORKERS),
                "BENCH_B_RUNS": str(workloads.B_RUNS),
                "BENCH_B_WARMUP": str(workloads.B_WARMUP),
            }
            ran = peers.run_peers(
                admin_url=admin_url,
                knobs=knobs,
                out=self.stdout.write,
                peers_dir=options["peers_dir"],
                prefect=options["peers_prefect"],
            )
            figures["peers"] = ran
            rows += bench_report.peer_rows(ran["peers"].values())
        found = bench_report.targets(
            rows, previous_batched=options["previous_batched"], previous_batched_ratio=options["previous_batched_ratio"]
        )
        figures["rows"] = rows
        figures["targets"] = [target.as_json() for target in found]
        self.stdout.write("\nEvery figure, side by side:\n" + bench_report.table(rows))
        self.stdout.write("\nTargets (issue 17), from this run:\n" + bench_report.targets_table(found))
        write_json(figures, options["json"])
        self.stdout.write(f"figures written to {options['json']}")
