"""``manage.py nodeflow_bench``: throughput, latency and commit figures, with a
pgbench baseline from the same run. PostgreSQL only (see tools/bench.py)."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from tools.bench import Bench, write_json
from tools.stack import live_database_url, with_database


class Command(BaseCommand):
    help = "Benchmark the server against a pgbench baseline (PostgreSQL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tasks", type=int, default=12000, help="tasks for the batched throughput run")
        parser.add_argument("--unbatched-tasks", type=int, default=1500)
        parser.add_argument("--latency-runs", type=int, default=100)
        parser.add_argument("--json", default="bench-results.json", help="where to write the figures")

    def handle(self, *args, tasks: int, unbatched_tasks: int, latency_runs: int, json: str, **options) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("the benchmark needs PostgreSQL: set DATABASE_URL=postgres://…")
        bench = Bench(
            admin_url=with_database(live_database_url(), "postgres"),
            tasks=tasks,
            unbatched_tasks=unbatched_tasks,
            latency_runs=latency_runs,
            out=self.stdout.write,
        )
        figures = bench.run()
        write_json(figures, json)
        self.stdout.write(f"figures written to {json}")
