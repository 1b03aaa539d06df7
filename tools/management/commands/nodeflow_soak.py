"""``manage.py nodeflow_soak --minutes 10``: a steady load for N minutes,
reporting throughput drift, each process's memory and the main tables'
growth, with a purge keeping them bounded. PostgreSQL only (see
tools/soak.py and docs/reliability.md)."""

import signal

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from tools.bench import write_json
from tools.soak import Options, Soak, summary_lines
from tools.stack import live_database_url, with_database


class Command(BaseCommand):
    help = "Run a steady load for N minutes and report drift, memory and table growth (PostgreSQL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--minutes", type=float, default=10.0, help="how long the load runs")
        parser.add_argument("--rate", type=float, default=10.0, help="workflow starts per second")
        parser.add_argument("--workers", type=int, default=2, help="worker processes")
        parser.add_argument(
            "--retention-seconds",
            type=float,
            default=60.0,
            help="the purge deletes executions that ended longer ago than this",
        )
        parser.add_argument("--purge-every-seconds", type=float, default=30.0)
        parser.add_argument("--report-every-seconds", type=float, default=60.0)
        parser.add_argument(
            "--warmup-seconds", type=float, default=30.0, help="load run before the first interval (not measured)"
        )
        parser.add_argument(
            "--database-name", default="nodeflow_soak", help="the throw-away database the run creates and drops"
        )
        parser.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
        parser.add_argument("--json", default="soak-results.json", help="where to write the figures")

    def handle(
        self,
        *args,
        minutes: float,
        rate: float,
        workers: int,
        retention_seconds: float,
        purge_every_seconds: float,
        report_every_seconds: float,
        warmup_seconds: float,
        database_name: str,
        keep_database: bool,
        json: str,
        **options,
    ) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("the soak needs PostgreSQL: set DATABASE_URL=postgres://…")
        for name, value in (
            ("--minutes", minutes),
            ("--rate", rate),
            ("--workers", workers),
            ("--retention-seconds", retention_seconds),
            ("--purge-every-seconds", purge_every_seconds),
            ("--report-every-seconds", report_every_seconds),
        ):
            if value <= 0:
                raise CommandError(f"{name} must be greater than 0")
        if warmup_seconds < 0:
            raise CommandError("--warmup-seconds must not be negative")
        soak = Soak(
            admin_url=with_database(live_database_url(), "postgres"),
            out=self.report,
            options=Options(
                minutes=minutes,
                rate=rate,
                workers=workers,
                retention_s=retention_seconds,
                purge_every_s=purge_every_seconds,
                report_every_s=report_every_seconds,
                warmup_s=warmup_seconds,
                database_name=database_name,
                keep_database=keep_database,
            ),
        )
        # SIGTERM as Ctrl-C: the processes are stopped and the database dropped.
        signal.signal(signal.SIGTERM, _interrupt)
        figures = soak.run()
        for line in summary_lines(figures):
            self.stdout.write(line)
        write_json(figures, json)
        self.stdout.write(f"figures written to {json}")

    def report(self, line: str) -> None:
        # Flushed: a soak's minute-by-minute lines are read while it runs, often from a file.
        self.stdout.write(line)
        self.stdout.flush()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
