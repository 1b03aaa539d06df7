"""``manage.py nodeflow_purge --older-than-days N``: delete finished execution
trees older than N days, in batches (``executions.purge``). Safe to run
from cron beside a live server and beside another purge."""

from __future__ import annotations

import datetime as dt
import pathlib
import time

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from executions.purge import DEFAULT_BATCH_SIZE, purge_executions
from nodeflow import clock
from nodeflow.models import Namespace

BAR_WIDTH = 30
# A bar redrawn more often than this on a terminal is noise; off a terminal
# (cron, a log file) one line per PLAIN_EVERY_S.
REDRAW_S = 0.2
PLAIN_EVERY_S = 10.0


class ProgressBar:
    """A plain-text progress bar on a command's stderr (an OutputWrapper):
    redrawn in place on a terminal, a line now and then otherwise."""

    def __init__(self, stream: OutputWrapper, label: str) -> None:
        self.stream = stream
        self.label = label
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.last_drawn = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last_drawn < (REDRAW_S if self.tty else PLAIN_EVERY_S):
            return
        self.last_drawn = now
        self._draw(done, total, end="\r" if self.tty else "\n")

    def finish(self, done: int, total: int) -> None:
        self._draw(done, max(total, done), end="\n")

    def _draw(self, done: int, total: int, *, end: str) -> None:
        fraction = done / total if total else 1.0
        filled = int(BAR_WIDTH * fraction)
        rate = done / max(time.monotonic() - self.started, 1e-9)
        self.stream.write(
            f"{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total} ({fraction:.0%}, {rate:.0f}/s)",
            ending=end,
        )
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "Delete finished executions (with their tasks, timers, messages and the rest) that ended more than "
        "N days ago. A sub-workflow tree goes whole, and only once every member has ended."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--older-than-days",
            type=float,
            required=True,
            help="purge executions that ended more than this many days ago",
        )
        parser.add_argument("--namespace", help="only this namespace")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=DEFAULT_BATCH_SIZE,
            help="root executions per transaction (default %(default)s)",
        )
        parser.add_argument(
            "--archive-dir", type=pathlib.Path, help="write each batch as gzipped JSON lines here before deleting it"
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would be purged; delete nothing")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(
        self,
        *args,
        older_than_days: float,
        namespace: str | None,
        batch_size: int,
        archive_dir: pathlib.Path | None,
        dry_run: bool,
        no_progress: bool,
        **options,
    ) -> None:
        if older_than_days < 0:
            raise CommandError("--older-than-days must be 0 or more")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if namespace is not None and not Namespace.objects.filter(name=namespace).exists():
            raise CommandError(f"namespace '{namespace}' does not exist")
        cutoff = clock.now() - dt.timedelta(days=older_than_days)
        verb = "would purge" if dry_run else "purged"
        bar = None if no_progress else ProgressBar(self.stderr, "checking" if dry_run else "purging")
        purged = purge_executions(
            older_than=cutoff,
            namespace=namespace,
            batch_size=batch_size,
            archive_dir=archive_dir,
            dry_run=dry_run,
            progress=bar,
        )
        if bar is not None:
            bar.finish(purged, purged)
        self.stdout.write(
            f"{verb} {purged} execution(s) that ended before {cutoff.isoformat()}"
            + (f" in namespace {namespace}" if namespace else "")
        )
