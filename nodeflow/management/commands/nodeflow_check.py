"""``manage.py nodeflow_check``: is this deployment sound? Prints each check
as OK, WARN or FAIL with what is wrong and how to fix it; exits 1 when any
check FAILs (2 with ``--strict`` when any WARNs), so it can gate a deploy or
back a health probe. The checks live in ``nodeflow.deployment_check``."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from nodeflow.deployment_check import FAIL, OK, WARN, run_checks


class Command(BaseCommand):
    help = "Check the database, migrations, broker, settings, bootstrap rows and role lag; exit 1 on FAIL."
    requires_system_checks: list = []  # this command reports problems; it must run despite them

    def add_arguments(self, parser) -> None:
        parser.add_argument("--strict", action="store_true", help="exit 2 when a check WARNs (and none FAILs)")

    def handle(self, *args, strict: bool, **options) -> None:
        findings = run_checks()
        styles = {OK: self.style.SUCCESS, WARN: self.style.WARNING, FAIL: self.style.ERROR}
        for finding in findings:
            self.stdout.write(f"{styles[finding.level](finding.level.ljust(4))} {finding.name}: {finding.message}")
            if finding.fix and finding.level != OK:
                self.stdout.write(f"     fix: {finding.fix}")
        levels = {finding.level for finding in findings}
        counts = ", ".join(f"{sum(f.level == level for f in findings)} {level}" for level in (OK, WARN, FAIL))
        self.stdout.write(counts)
        if FAIL in levels:
            raise SystemExit(1)
        if strict and WARN in levels:
            raise SystemExit(2)
