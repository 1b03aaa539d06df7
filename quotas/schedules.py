"""Schedules: start a workflow on a cron expression in a time zone.

A schedule's ``next_fire_at`` is the claim. The scheduler role locks one due
schedule with SKIP LOCKED, starts the execution and moves ``next_fire_at``
on in the same transaction: each firing happens once however many
schedulers run, and a scheduler killed mid-way leaves it due. The start is
an ordinary one, subject to every control on starts; a refusal (a quota,
maxConcurrentExecutions) is recorded on the schedule as ``lastError`` and
``lastRefusal`` and that firing is skipped. Firings missed while no
scheduler ran are not replayed: the next firing is the first after now.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.db import IntegrityError, transaction

from executions import lifecycle
from metadata.models import WorkflowDefinition
from nodeflow import claims, clock, transactions
from nodeflow.errors import ApiError, InvalidField, LimitExceeded, NotFound, QuotaExceeded
from nodeflow.models import Namespace
from quotas import namespace_quotas
from quotas.models import Schedule

FIELDS = ("cron", "timezone", "workflow_name", "version", "input", "paused")


def check_cron(expression: str) -> None:
    if not croniter.is_valid(expression):
        raise InvalidField("cron", f"'{expression}' is not a cron expression (e.g. '*/5 * * * *')")


def check_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidField("timezone", f"'{name}' is not an IANA time zone (e.g. 'Europe/Paris')") from exc


def next_fire(*, cron: str, timezone: str, after: dt.datetime) -> dt.datetime:
    """The first firing strictly after ``after``, read in ``timezone`` (so
    '0 9 * * *' is 09:00 local through daylight-saving changes), in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    return croniter(cron, local).get_next(dt.datetime).astimezone(dt.UTC)


def get_schedule(*, namespace: Namespace, name: str) -> Schedule:
    found = Schedule.objects.filter(namespace=namespace, name=name).first()
    if found is None:
        raise NotFound(f"schedule '{name}' does not exist")
    return found


def upsert_schedule(*, namespace: Namespace, name: str, values: dict) -> tuple[Schedule, bool]:
    """Create the schedule or replace every field of it; (row, created).
    ``values`` holds the FIELDS, validated. A new one counts against maxSchedules."""
    check_cron(values["cron"])
    check_timezone(values["timezone"])
    if not WorkflowDefinition.objects.filter(namespace=namespace, name=values["workflow_name"]).exists():
        raise InvalidField("workflowName", f"workflow definition '{values['workflow_name']}' does not exist")
    now = clock.now()
    fields = {**{key: values[key] for key in FIELDS}, "updated_at": now}
    fields["next_fire_at"] = next_fire(cron=fields["cron"], timezone=fields["timezone"], after=now)
    try:
        with transactions.outermost():
            if Schedule.objects.filter(namespace=namespace, name=name).update(**fields):
                return get_schedule(namespace=namespace, name=name), False
            namespace_quotas.check_new_schedule(namespace=namespace)
            return Schedule.objects.create(namespace=namespace, name=name, created_at=now, **fields), True
    except IntegrityError:  # created concurrently: replace it
        Schedule.objects.filter(namespace=namespace, name=name).update(**fields)
        return get_schedule(namespace=namespace, name=name), False


def delete_schedule(*, namespace: Namespace, name: str) -> None:
    deleted, _ = Schedule.objects.filter(namespace=namespace, name=name).delete()
    if not deleted:
        raise NotFound(f"schedule '{name}' does not exist")


def set_paused(*, namespace: Namespace, name: str, paused: bool) -> Schedule:
    """Pause or resume. Resuming fires next at the first time after now:
    firings that fell in the pause are not replayed."""
    schedule = get_schedule(namespace=namespace, name=name)
    now = clock.now()
    fields = {"paused": paused, "updated_at": now}
    if not paused:
        fields["next_fire_at"] = next_fire(cron=schedule.cron, timezone=schedule.timezone, after=now)
    Schedule.objects.filter(pk=schedule.pk).update(**fields)
    return get_schedule(namespace=namespace, name=name)


def fire_next_schedule() -> bool:
    """Fire one due schedule; False when none is due. A firing that raises
    is recorded in ``lastError`` and the schedule moves on to its next
    firing (``nodeflow.claims``)."""
    now = clock.now()
    return claims.claim_one(
        claim=lambda: (
            Schedule.objects.filter(paused=False, next_fire_at__lte=now)
            .order_by("next_fire_at")
            .select_for_update(skip_locked=True)
            .first()
        ),
        work=lambda schedule: _fire(schedule, now, _start(schedule, now)),
        back_off=lambda schedule, exc: _fire(schedule, now, {"last_error": f"internal error: {exc}"}),
        what=lambda schedule: f"schedule {schedule.name} ({schedule.id}) of {schedule.workflow_name}",
    )


def _fire(schedule: Schedule, now: dt.datetime, outcome: dict) -> None:
    """Move the schedule on to its next firing, recording this one's ``outcome``."""
    due = schedule.next_fire_at
    fields = {
        "next_fire_at": next_fire(cron=schedule.cron, timezone=schedule.timezone, after=max(now, due)),
        "last_fired_at": now,
        "updated_at": now,
        **outcome,
    }
    Schedule.objects.filter(pk=schedule.pk, next_fire_at=due).update(**fields)


def _start(schedule: Schedule, now: dt.datetime) -> dict:
    """Start the firing's execution in a savepoint: a refusal is recorded and
    the claim still commits (a bad schedule never blocks the others)."""
    due = schedule.next_fire_at
    try:
        with transaction.atomic():
            execution, _ = lifecycle.start_execution(
                namespace=Namespace.objects.get(pk=schedule.namespace_id),
                name=schedule.workflow_name,
                version=schedule.version,
                input=dict(schedule.input or {}),
                idempotency_key=f"schedule:{schedule.id}:{due.isoformat()}",
            )
        return {"last_execution_id": execution.id, "last_error": "", "last_refusal": None}
    except (LimitExceeded, QuotaExceeded) as exc:
        refusal = {**exc.body(), "at": _iso(now), "scheduledFor": _iso(due)}
        return {"last_error": exc.message, "last_refusal": refusal}
    except ApiError as exc:
        return {"last_error": exc.message}


def _iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")
