"""``manage.py nodeflow_stress``: many processes × many pollers against the
controls for a bounded time; prints the most seen in flight per control
(see tools/stress.py). Meant for PostgreSQL; SQLite works, slowly."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from tools import stress


class Command(BaseCommand):
    help = "Stress the concurrency cap, a shared semaphore and a rate limit from several processes."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--processes", type=int, default=4)
        parser.add_argument("--pollers", type=int, default=8, help="polling threads per process")
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--cap", type=int, default=3, help="concurrentExecLimit of stress_capped (0: none)")
        parser.add_argument("--permits", type=int, default=4, help="permits of stress_sem (0: no semaphore)")
        parser.add_argument("--rate", type=int, default=20, help="dispatches of stress_capped per window (0: none)")
        parser.add_argument("--window", dest="window_s", type=float, default=1.0, help="rate window, seconds")
        parser.add_argument("--work-ms", type=float, nargs=2, default=(2.0, 20.0), metavar=("MIN", "MAX"))
        parser.add_argument("--tasks", type=int, default=1000, help="ready tasks per queue at the start")
        parser.add_argument("--batch", type=int, default=5, help="count asked for by each poll")
        parser.add_argument("--namespace", default="stress")
        parser.add_argument("--no-controls", action="store_true", help="no cap, semaphore or rate limit")
        parser.add_argument("--check", action="store_true", help="fail if any limit was exceeded")
        parser.add_argument("--json", help="write the figures here")
        parser.add_argument("--child", help=None)
        parser.add_argument("--plan", help=None)

    def handle(self, *args, **options) -> None:
        if options["child"]:
            stress.run_child(stress.Plan(**json.loads(options["plan"])), options["child"])
            return
        if options["no_controls"]:
            options.update(cap=0, permits=0, rate=0)
        plan = stress.plan_from(options)
        figures = stress.run(plan, out=self.stdout.write)
        if options["json"]:
            with open(options["json"], "w") as out:
                json.dump(figures, out, indent=2)
        found = stress.violations(plan, figures)
        if options["check"] and found:
            raise CommandError("limits exceeded: " + "; ".join(found))
