"""``python -m nodeflow_client``: the client's verbs from a shell.

Every command prints the server's answer as JSON on stdout (a list for the
list commands) and exits with a code a script can test:

    0  done (for wait and --wait: the execution ended COMPLETED)
    1  the server refused: its error body, as JSON, on stderr
    2  usage: bad arguments, an unreadable file or JSON argument, no API key
    3  the server could not be reached or did not answer in time
    4  wait / --wait gave up: the execution had not ended (it is on stdout)
    5  wait / --wait: the execution ended, but not COMPLETED (it is on stdout)

A JSON argument is JSON text, ``@path`` (a JSON file, or YAML when the
name ends in .yaml/.yml and PyYAML is importable) or ``-`` (standard input).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeflow_client.client import DEFAULT_TIMEOUT_S, DEFAULT_URL, Client
from nodeflow_client.errors import ConnectionFailed, NodeFlowError, NotFound, WaitTimeout
from nodeflow_client.models import EXECUTION_STATUSES, TASK_STATUSES, Execution, Model

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_WAIT_TIMEOUT = 4
EXIT_NOT_COMPLETED = 5
DEFAULT_WAIT_S = 60.0
DEFAULT_LIST_LIMIT = 100


class UsageError(Exception):
    """A mistake in the command line or its inputs (exit 2)."""


@dataclass
class Outcome:
    """What a command printed and the exit code it asks for."""

    value: Any
    code: int = EXIT_OK


Command = Callable[[Client, argparse.Namespace], Any]


def json_argument(text: str) -> Any:
    """JSON text, ``@path`` or ``-`` (stdin) → the value."""
    if text == "-":
        return _parse(sys.stdin.read(), "standard input")
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as handle:
                content = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
        if path.lower().endswith((".yaml", ".yml")):
            return _parse_yaml(content, path)
        return _parse(content, path)
    return _parse(text, "the argument")


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{where} is not JSON: {exc}") from exc


def _parse_yaml(text: str, where: str) -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise UsageError(f"{where}: reading YAML needs PyYAML; give JSON") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{where} is not YAML: {exc}") from exc


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"{what} must be a JSON object")
    return value


# --- commands ---------------------------------------------------------------------


def _waited(client: Client, execution: Execution, args: argparse.Namespace) -> Outcome:
    """The outcome of waiting for ``execution`` to end (wait and --wait)."""
    try:
        ended = client.wait(execution.id, timeout=args.timeout)
    except WaitTimeout as exc:
        last = exc.execution or execution
        _complain({"error": "WAIT_TIMEOUT", "message": exc.message, "executionStatus": last.status})
        return Outcome(last, EXIT_WAIT_TIMEOUT)
    return Outcome(ended, EXIT_OK if ended.status == "COMPLETED" else EXIT_NOT_COMPLETED)


def _maybe_wait(client: Client, execution: Execution, args: argparse.Namespace) -> Any:
    return _waited(client, execution, args) if args.wait else execution


def cmd_start(client: Client, args: argparse.Namespace) -> Any:
    execution = client.start(
        args.name,
        _object(json_argument(args.input), "--input") if args.input is not None else None,
        version=args.version,
        correlation_id=args.correlation_id,
        idempotency_key=args.idempotency_key,
        priority=args.priority,
    )
    return _maybe_wait(client, execution, args)


def cmd_start_many(client: Client, args: argparse.Namespace) -> Any:
    value = json_argument(args.starts)
    starts = value.get("executions") if isinstance(value, dict) else value
    if not isinstance(starts, list):
        raise UsageError('give a list of starts, or {"executions": [...]}')
    return client.start_many(starts)


def cmd_wait(client: Client, args: argparse.Namespace) -> Any:
    return _waited(client, client.get(args.id), args)


def _action(name: str) -> Command:
    def run(client: Client, args: argparse.Namespace) -> Any:
        execution = getattr(client, name)(args.id)
        return _maybe_wait(client, execution, args) if hasattr(args, "wait") else execution

    return run


def cmd_terminate(client: Client, args: argparse.Namespace) -> Any:
    return client.terminate(args.id, args.reason)


def cmd_list(client: Client, args: argparse.Namespace) -> Any:
    filters = {"status": args.status, "name": args.workflow, "correlation_id": args.correlation_id}
    if args.page:
        page = client.executions_page(**filters, cursor=args.cursor, limit=args.page_size)
        return page.raw
    limit = None if args.all else args.limit
    return list(client.list_executions(**filters, cursor=args.cursor, page_size=args.page_size, limit=limit))


def cmd_tasks(client: Client, args: argparse.Namespace) -> Any:
    filters = {"status": args.status, "path": args.path, "path_prefix": args.path_prefix}
    if args.page:
        return client.tasks_page(args.id, **filters, cursor=args.cursor, limit=args.page_size).raw
    limit = None if args.all else args.limit
    return list(client.list_tasks(args.id, **filters, cursor=args.cursor, page_size=args.page_size, limit=limit))


def cmd_message(client: Client, args: argparse.Namespace) -> Any:
    return {"id": client.send_message(args.id, json_argument(args.message))}


def cmd_webhook(client: Client, args: argparse.Namespace) -> Any:
    return client.call_webhook(args.name, _object(json_argument(args.body), "the webhook body"))


def cmd_complete_human(client: Client, args: argparse.Namespace) -> Any:
    output = _object(json_argument(args.output), "--output") if args.output is not None else None
    task_id = args.task_id or _human_task(client, args)
    status = "FAILED" if args.fail is not None else args.status
    return client.complete_human(task_id, output, status=status, reason=args.fail or args.reason)


def _human_task(client: Client, args: argparse.Namespace) -> str:
    if not args.execution:
        raise UsageError("give the HUMAN task's id, or --execution ID (and --ref REF)")
    waiting = client.human_tasks(args.execution, args.ref)
    if not waiting:
        which = f" {args.ref!r}" if args.ref else ""
        message = f"execution {args.execution} has no HUMAN task{which} waiting"
        raise NotFound(message, code="NOT_FOUND", body={"error": "NOT_FOUND", "message": message})
    if len(waiting) > 1:
        which = f" named {args.ref!r}" if args.ref else ""
        found = ", ".join(t.reference_task_name for t in waiting) or "none"
        raise UsageError(
            f"execution {args.execution} has {len(waiting)} HUMAN tasks{which} waiting ({found}); say which"
        )
    return waiting[0].task_id


def cmd_result(client: Client, args: argparse.Namespace) -> Any:
    output = _object(json_argument(args.output), "--output") if args.output is not None else None
    next = None
    if args.next:
        next = {"count": args.next, **({"workerId": args.worker_id} if args.worker_id else {})}
    return client.report_result(
        args.task_id,
        lease_token=args.lease,
        status=args.status,
        output=output,
        reason=args.reason,
        callback_after_s=args.callback_after,
        next=next,
    )


def cmd_secret_put(client: Client, args: argparse.Namespace) -> Any:
    value = args.value if args.value is not None else sys.stdin.read().rstrip("\n")
    client.set_secret(args.name, value)
    return {"name": args.name}


# --- the parser ---------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes, before or after its name: the real
    defaults on the top parser, none on the commands' (they override only
    when given)."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--url", default=default(os.environ.get("NF_URL") or DEFAULT_URL), help="env NF_URL")
    parser.add_argument("--api-key", default=default(os.environ.get("NF_API_KEY")), help="env NF_API_KEY")
    parser.add_argument(
        "-n",
        "--namespace",
        default=default(os.environ.get("NF_NAMESPACE") or "default"),
        help="env NF_NAMESPACE; default: default",
    )
    parser.add_argument(
        "--http-timeout", type=float, default=default(DEFAULT_TIMEOUT_S), metavar="S", help="seconds per request"
    )
    parser.add_argument(
        "--compact", action="store_true", default=default(False), help="one line of JSON instead of indented"
    )


COMMON = argparse.ArgumentParser(add_help=False)
_global_options(COMMON, defaults=False)


def _sub(group: Any, name: str, run: Command, help: str, *arguments: tuple[Sequence[str], dict[str, Any]]) -> Any:
    parser = group.add_parser(name, help=help, description=help, parents=[COMMON])
    for flags, options in arguments:
        parser.add_argument(*flags, **options)
    parser.set_defaults(run=run)
    return parser


def arg(*flags: str, **options: Any) -> tuple[Sequence[str], dict[str, Any]]:
    return flags, options


WAIT = arg("--wait", action="store_true", help="wait until the execution ends (exit 0 only if COMPLETED)")
WAIT_TIMEOUT = arg(
    "--timeout",
    type=float,
    default=DEFAULT_WAIT_S,
    metavar="S",
    help=f"with --wait: give up after S seconds (exit 4; default {DEFAULT_WAIT_S:g})",
)
ID = arg("id", metavar="ID", help="the execution's id")
JSON_HELP = "JSON, @file or - (stdin)"


def _definitions(commands: Any) -> None:
    taskdef = commands.add_parser("taskdef", help="task definitions").add_subparsers(dest="verb", required=True)
    _sub(
        taskdef,
        "put",
        lambda c, a: [d for path in a.files for d in c.register_task_definitions_file(path)],
        "create or replace task definitions from JSON/YAML files (- is stdin)",
        arg("files", nargs="+", metavar="FILE"),
    )
    _sub(taskdef, "get", lambda c, a: c.get_task_definition(a.name), "one task definition", arg("name"))
    _sub(taskdef, "list", lambda c, a: c.list_task_definitions(), "every task definition")
    _sub(
        taskdef,
        "patch",
        lambda c, a: c.update_task_definition(a.name, _object(json_argument(a.fields), "the fields")),
        "change some fields, keeping the others",
        arg("name"),
        arg("fields", metavar="JSON", help=JSON_HELP),
    )
    _sub(taskdef, "delete", lambda c, a: c.delete_task_definition(a.name), "delete a task definition", arg("name"))

    workflow = commands.add_parser("workflow", help="workflow definitions").add_subparsers(dest="verb", required=True)
    version = arg("--version", type=int, help="a version (default: the published one)")
    _sub(
        workflow,
        "put",
        lambda c, a: [d for path in a.files for d in c.register_workflows_file(path)],
        "register new versions from JSON/YAML files (- is stdin)",
        arg("files", nargs="+", metavar="FILE"),
    )
    _sub(workflow, "get", lambda c, a: c.get_workflow(a.name, a.version), "one version", arg("name"), version)
    _sub(workflow, "list", lambda c, a: c.list_workflows(), "every workflow definition (its published version)")
    _sub(workflow, "versions", lambda c, a: c.workflow_versions(a.name), "every version of one", arg("name"))
    _sub(
        workflow,
        "publish",
        lambda c, a: c.publish_workflow(a.name, a.version),
        "publish a version (default: the latest)",
        arg("name"),
        arg("--version", type=int),
    )
    _sub(
        workflow,
        "rollback",
        lambda c, a: c.rollback_workflow(a.name, a.version),
        "re-publish an earlier version (default: the one before)",
        arg("name"),
        arg("--version", type=int),
    )
    _sub(workflow, "delete", lambda c, a: c.delete_workflow(a.name), "delete it and all its versions", arg("name"))


def _executions(commands: Any) -> None:
    _sub(
        commands,
        "start",
        cmd_start,
        "start an execution",
        arg("name", help="the workflow"),
        arg("--input", metavar="JSON", help=f"the input: {JSON_HELP}"),
        arg("--version", type=int, help="default: the published version"),
        arg("--correlation-id"),
        arg("--idempotency-key", help="the same key again returns the same execution"),
        arg("--priority", type=int, help="0-99"),
        WAIT,
        WAIT_TIMEOUT,
    )
    _sub(
        commands,
        "start-many",
        cmd_start_many,
        "up to 100 starts in one request; one answer each",
        arg("starts", metavar="JSON", help=f'a list of start bodies or {{"executions": [...]}}: {JSON_HELP}'),
    )
    _sub(
        commands,
        "get",
        lambda c, a: c.get(a.id, include_tasks=not a.no_tasks, all_tasks=a.all_tasks),
        "an execution with its tasks (the server shows up to 1,000: then tasksNext is set)",
        ID,
        arg("--no-tasks", action="store_true", help="the execution alone"),
        arg("--all-tasks", action="store_true", help="every task, however many (fetched page after page)"),
    )
    _sub(
        commands,
        "tasks",
        cmd_tasks,
        "an execution's tasks (every attempt of its current run), in the order they were scheduled",
        ID,
        arg("--status", choices=TASK_STATUSES),
        arg("--path", help="exactly this path (fan[3].charge)"),
        arg("--path-prefix", help="under this path (fan[3].)"),
        arg("--limit", type=int, default=DEFAULT_LIST_LIMIT, help=f"at most this many (default {DEFAULT_LIST_LIMIT})"),
        arg("--all", action="store_true", help="every match, page after page"),
        arg("--page-size", type=int, default=100, help="tasks per request (1-1000)"),
        arg("--cursor", help="start after this cursor (an execution's tasksNext, a page's next)"),
        arg("--page", action="store_true", help="print one page as the server sends it, with its next cursor"),
    )
    _sub(
        commands,
        "wait",
        cmd_wait,
        "wait until an execution ends (exit 0 if COMPLETED, 5 otherwise, 4 on timeout)",
        ID,
        arg("--timeout", type=float, default=DEFAULT_WAIT_S, metavar="S", help="seconds (default 60)"),
    )
    _sub(commands, "terminate", cmd_terminate, "terminate an execution", ID, arg("--reason", default=""))
    _sub(commands, "pause", _action("pause"), "pause: schedule and dispatch nothing new", ID)
    for name, help in (
        ("resume", "resume a paused execution"),
        ("retry", "retry an ended execution from its failed task"),
        ("restart", "restart an ended execution from the beginning"),
    ):
        _sub(commands, name, _action(name), help, ID, WAIT, WAIT_TIMEOUT)
    _sub(commands, "decide", _action("decide"), "evaluate an execution now", ID)
    _sub(
        commands,
        "list",
        cmd_list,
        "executions, newest first",
        arg("--status", choices=EXECUTION_STATUSES),
        arg("--workflow", help="the workflow's name"),
        arg("--correlation-id"),
        arg("--limit", type=int, default=DEFAULT_LIST_LIMIT, help=f"at most this many (default {DEFAULT_LIST_LIMIT})"),
        arg("--all", action="store_true", help="every match, page after page"),
        arg("--page-size", type=int, default=50, help="executions per request (1-500)"),
        arg("--cursor", help="start after this cursor"),
        arg("--page", action="store_true", help="print one page as the server sends it, with its next cursor"),
    )


def _signals(commands: Any) -> None:
    _sub(
        commands,
        "message",
        cmd_message,
        "post a message to an execution (for PULL_WORKFLOW_MESSAGES)",
        ID,
        arg("message", metavar="JSON", help=JSON_HELP),
    )
    _sub(
        commands,
        "webhook",
        cmd_webhook,
        "deliver an inbound webhook to the WAIT_FOR_WEBHOOK tasks it matches",
        arg("name", help="the waiting task's name (its 'name' in the workflow, not its reference name)"),
        arg("body", metavar="JSON", help=f"the body, an object: {JSON_HELP}"),
    )
    _sub(
        commands,
        "complete-human",
        cmd_complete_human,
        "complete (or fail) a HUMAN task",
        arg("task_id", nargs="?", metavar="TASK_ID", help="the task; or --execution (and --ref)"),
        arg("--execution", metavar="ID", help="the execution whose waiting HUMAN task to complete"),
        arg("--ref", help="with --execution: the task's reference name"),
        arg("--output", metavar="JSON", help=f"what the person submits: {JSON_HELP}"),
        arg("--status", default="COMPLETED", choices=("COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR")),
        arg("--reason", help="reasonForIncompletion, when failing it"),
        arg("--fail", metavar="REASON", help="fail it (FAILED) with this reason"),
    )


def _worker_half(commands: Any) -> None:
    task = commands.add_parser("task", help="the worker's half, by hand").add_subparsers(dest="verb", required=True)
    _sub(
        task,
        "poll",
        lambda c, a: c.poll(a.task_type, worker_id=a.worker_id, count=a.count, wait_s=a.wait),
        "lease up to --count ready tasks of a queue",
        arg("task_type", metavar="TASK_TYPE"),
        arg("--worker-id", help="shows as the task's workerId"),
        arg("--count", type=int, default=1, help="1-100"),
        arg("--wait", type=float, default=0, metavar="S", help="long-poll up to S seconds (0-30) for one"),
    )
    _sub(
        task,
        "result",
        cmd_result,
        "report a leased task's result",
        arg("task_id", metavar="TASK_ID"),
        arg("--lease", required=True, metavar="TOKEN", help="the leaseToken the poll gave"),
        arg(
            "--status",
            default="COMPLETED",
            choices=("COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "IN_PROGRESS"),
        ),
        arg("--output", metavar="JSON", help=f"outputData: {JSON_HELP}"),
        arg("--reason", help="reasonForIncompletion"),
        arg("--callback-after", type=float, metavar="S", help="with IN_PROGRESS: offer it again after S seconds"),
        arg("--next", type=int, metavar="N", help="lease the next N tasks of its type in the same request"),
        arg("--worker-id", help="with --next"),
    )
    _sub(
        task,
        "heartbeat",
        lambda c, a: c.heartbeat(a.task_id, a.lease, json_argument(a.progress) if a.progress else None),
        "extend a lease",
        arg("task_id", metavar="TASK_ID"),
        arg("--lease", required=True, metavar="TOKEN"),
        arg("--progress", metavar="JSON", help=JSON_HELP),
    )


def _controls(commands: Any) -> None:
    queue = commands.add_parser("queue", help="worker queues").add_subparsers(dest="verb", required=True)
    _sub(queue, "list", lambda c, a: c.queues(), "every queue: depth and in flight")
    _sub(queue, "depth", lambda c, a: c.queue(a.task_type), "one queue", arg("task_type", metavar="TASK_TYPE"))
    _sub(
        queue, "workers", lambda c, a: c.queue_workers(a.task_type), "workers and their last polls", arg("--task-type")
    )
    semaphore = commands.add_parser("semaphore", help="named semaphores").add_subparsers(dest="verb", required=True)
    _sub(semaphore, "list", lambda c, a: c.semaphores(), "every semaphore")
    _sub(semaphore, "get", lambda c, a: c.semaphore(a.name), "one, with its holders", arg("name"))
    _sub(
        semaphore,
        "put",
        lambda c, a: c.set_semaphore(a.name, a.permits),
        "create or change one",
        arg("name"),
        arg("permits", type=int),
    )
    _sub(semaphore, "delete", lambda c, a: c.delete_semaphore(a.name), "delete one", arg("name"))
    quotas = commands.add_parser("quotas", help="the namespace's quotas").add_subparsers(dest="verb", required=True)
    _sub(quotas, "get", lambda c, a: c.quotas(), "the quotas (null: unlimited)")
    _sub(
        quotas,
        "put",
        lambda c, a: c.set_quotas(_object(json_argument(a.quotas), "the quotas")),
        "replace the quotas (one left out is unlimited)",
        arg("quotas", metavar="JSON", help=JSON_HELP),
    )
    schedule = commands.add_parser("schedule", help="schedules").add_subparsers(dest="verb", required=True)
    _sub(schedule, "list", lambda c, a: c.schedules(), "every schedule")
    _sub(schedule, "get", lambda c, a: c.schedule(a.name), "one schedule", arg("name"))
    _sub(
        schedule,
        "put",
        lambda c, a: c.put_schedule(_object(json_argument(a.schedule), "the schedule")),
        "create or replace a schedule",
        arg("schedule", metavar="JSON", help=JSON_HELP),
    )
    _sub(schedule, "pause", lambda c, a: c.pause_schedule(a.name), "pause one", arg("name"))
    _sub(schedule, "resume", lambda c, a: c.resume_schedule(a.name), "resume one", arg("name"))
    _sub(schedule, "delete", lambda c, a: c.delete_schedule(a.name), "delete one", arg("name"))
    _sub(commands, "breakers", lambda c, a: c.breakers(), "circuit breakers, per process")
    secret = commands.add_parser("secret", help="secrets (admin)").add_subparsers(dest="verb", required=True)
    _sub(secret, "list", lambda c, a: c.secrets(), "secret names")
    _sub(
        secret, "put", cmd_secret_put, "set a secret (the value from --value, else stdin)", arg("name"), arg("--value")
    )
    _sub(secret, "delete", lambda c, a: c.delete_secret(a.name), "delete a secret", arg("name"))
    _sub(commands, "health", lambda c, a: c.health(), "the server's health (/healthz)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="nodeflow",
        description="Node Flow from a shell: every answer is JSON on stdout.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(top, defaults=True)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _definitions(commands)
    _executions(commands)
    _signals(commands)
    _worker_half(commands)
    _controls(commands)
    return top


# --- running ------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """An answer as JSON data: a model is the server's JSON (``raw``)."""
    if isinstance(value, Model):
        return value.to_json()
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _print(value: Any, *, compact: bool, stream: Any = None) -> None:
    text = json.dumps(value, separators=(",", ":")) if compact else json.dumps(value, indent=2)
    print(text, file=stream or sys.stdout)


def _complain(body: dict[str, Any]) -> None:
    print(json.dumps(body), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.api_key:
        _complain({"error": "USAGE", "message": "no API key: pass --api-key or set NF_API_KEY"})
        return EXIT_USAGE
    try:
        with Client(args.url, args.api_key, args.namespace, timeout=args.http_timeout) as client:
            outcome = args.run(client, args)
    except (UsageError, ValueError) as exc:  # ValueError: a definition file that is not JSON
        _complain({"error": "USAGE", "message": str(exc)})
        return EXIT_USAGE
    except OSError as exc:  # a definition file that cannot be read
        _complain({"error": "USAGE", "message": f"{exc.filename}: {exc.strerror}"})
        return EXIT_USAGE
    except ConnectionFailed as exc:
        _complain({"error": "CONNECTION_FAILED", "message": exc.message})
        return EXIT_UNREACHABLE
    except NodeFlowError as exc:
        _complain(exc.body if exc.status is None or "status" in exc.body else {**exc.body, "status": exc.status})
        return EXIT_REFUSED
    if not isinstance(outcome, Outcome):
        outcome = Outcome(outcome)
    if outcome.value is not None:
        _print(plain(outcome.value), compact=args.compact)
    return outcome.code
