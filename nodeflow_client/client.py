"""The application client: definitions, executions, signals and controls
over the REST API (SPEC §3–§9). One call is one request, except ``wait``
(which polls) and the list iterators (which page); nothing is retried
behind the caller's back, since a start or a signal sent twice is two.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from nodeflow_client import files
from nodeflow_client.errors import ConnectionFailed, Unavailable, WaitTimeout, from_answer
from nodeflow_client.models import (
    Breaker,
    Execution,
    LeasedTask,
    Model,
    Page,
    Queue,
    QueueWorker,
    Quotas,
    Schedule,
    Semaphore,
    StartAnswer,
    Task,
    TaskDefinition,
    WebhookDelivery,
    WorkflowDefinition,
    WorkflowVersion,
)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 30.0
# wait(): the first pause between reads of the execution, how it grows, and its ceiling.
WAIT_FIRST_S = 0.05
WAIT_FACTOR = 1.5
WAIT_MAX_S = 1.0
USER_AGENT = "nodeflow-client/1"

M = TypeVar("M", bound=Model)


@functools.lru_cache(maxsize=1024)
def _absolute(url: str) -> httpx.URL:
    """``url`` parsed once and kept: httpx parses a relative URL twice per
    request (itself, then joined to the base), about a quarter of its CPU."""
    return httpx.URL(url)


def _segment(value: str | int) -> str:
    """A path segment: names and ids are sent as given, escaped."""
    return quote(str(value), safe="")


def _body(**fields: Any) -> dict[str, Any]:
    """A request body without the fields left unset (None): the server's defaults apply."""
    return {key: value for key, value in fields.items() if value is not None}


def start_body(
    name: str,
    input: dict[str, Any] | None = None,
    *,
    version: int | None = None,
    correlation_id: str | None = None,
    idempotency_key: str | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """A start as the API takes it (``POST …/executions`` and each item of the batch route)."""
    return _body(
        name=name,
        input=input,
        version=version,
        correlationId=correlation_id,
        idempotencyKey=idempotency_key,
        priority=priority,
    )


class Client:
    """One server, one namespace, one API key; a pool of connections, safe
    to share between threads. ``url`` and ``api_key`` default to the
    environment's ``NF_URL`` and ``NF_API_KEY``. Use it as a context manager,
    or ``close()`` it."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        namespace: str = "default",
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("NF_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("NF_API_KEY")
        if not key:
            raise ValueError("no API key: pass api_key= or set NF_API_KEY")
        self.namespace = namespace
        self.http = httpx.Client(
            base_url=self.url,
            headers={"x-api-key": key, "user-agent": USER_AGENT, "accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    # --- requests -------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
        namespaced: bool = True,
    ) -> httpx.Response:
        """One request to ``/v1/ns/{namespace}/{path}`` (or ``/{path}`` when
        not ``namespaced``); the answer when it is a success, else the
        server's refusal raised as a ``NodeFlowError``. For routes this
        client has no method for."""
        url = f"/v1/ns/{_segment(self.namespace)}/{path}" if namespaced else f"/{path}"
        headers = {"content-type": content_type} if content_type else None
        if json is not None:
            content, headers = _json_bytes(json), {"content-type": "application/json"}
        try:
            response = self.http.request(
                method, _absolute(self.url + url), content=content, params=_params(params), headers=headers
            )
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(f"no answer in time: {exc}", method=method, url=url) from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}", method=method, url=url) from exc
        if response.status_code >= 400:
            raise from_answer(
                response.status_code,
                _json_or_none(response),
                method=method,
                url=url,
                headers=dict(response.headers),
                text=response.text,
            )
        return response

    def _json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        response = self.request(method, path, json=body, **options)
        return None if response.status_code == 204 or not response.content else response.json()

    def _one(self, cls: type[M], method: str, path: str, body: Any = None, **options: Any) -> M:
        return cls.from_json(self._json(method, path, body, **options))

    def _list(self, cls: type[M], path: str, **options: Any) -> list[M]:
        return [cls.from_json(item) for item in self._json("GET", path, **options)]

    def health(self) -> dict[str, Any]:
        """``GET /healthz`` (needs no key)."""
        return self.request("GET", "healthz", namespaced=False).json()

    # --- task definitions (SPEC §3) --------------------------------------------

    def register_task_definition(self, definition: dict[str, Any]) -> TaskDefinition:
        """Create or replace the definition named ``definition["name"]``: fields
        left out take their defaults (``update_task_definition`` changes some)."""
        return self._one(TaskDefinition, "POST", "metadata/task-definitions", definition)

    def register_task_definitions_file(self, path: str | Path) -> list[TaskDefinition]:
        """Every task definition in a JSON or YAML file (one, or a list)."""
        return [
            self._posted(TaskDefinition, "metadata/task-definitions", document) for document in files.documents(path)
        ]

    def get_task_definition(self, name: str) -> TaskDefinition:
        return self._one(TaskDefinition, "GET", f"metadata/task-definitions/{_segment(name)}")

    def list_task_definitions(self) -> list[TaskDefinition]:
        return self._list(TaskDefinition, "metadata/task-definitions")

    def update_task_definition(self, name: str, fields: dict[str, Any]) -> TaskDefinition:
        """Change only ``fields`` (PATCH); the others keep their values."""
        return self._one(TaskDefinition, "PATCH", f"metadata/task-definitions/{_segment(name)}", fields)

    def delete_task_definition(self, name: str) -> None:
        self.request("DELETE", f"metadata/task-definitions/{_segment(name)}")

    # --- workflow definitions (SPEC §4) ----------------------------------------

    def register_workflow(self, definition: dict[str, Any] | str) -> WorkflowDefinition:
        """Store a new version (the first of a name is published at once, later
        ones are drafts until ``publish_workflow``). A ``str`` is YAML text."""
        document = files.Document(yaml=definition) if isinstance(definition, str) else files.Document(definition)
        return self._posted(WorkflowDefinition, "metadata/workflow-definitions", document)

    def register_workflows_file(self, path: str | Path) -> list[WorkflowDefinition]:
        """Every workflow definition in a JSON or YAML file (one, or a list)."""
        return [
            self._posted(WorkflowDefinition, "metadata/workflow-definitions", document)
            for document in files.documents(path)
        ]

    def get_workflow(self, name: str, version: int | None = None) -> WorkflowDefinition:
        """The published version, or the one named."""
        path = f"metadata/workflow-definitions/{_segment(name)}"
        return self._one(WorkflowDefinition, "GET", path if version is None else f"{path}/versions/{version}")

    def list_workflows(self) -> list[WorkflowDefinition]:
        """Every workflow definition, as its published version."""
        return self._list(WorkflowDefinition, "metadata/workflow-definitions")

    def workflow_versions(self, name: str) -> list[WorkflowVersion]:
        return self._list(WorkflowVersion, f"metadata/workflow-definitions/{_segment(name)}/versions")

    def publish_workflow(self, name: str, version: int | None = None) -> WorkflowDefinition:
        """Publish ``version`` (default: the latest)."""
        path = f"metadata/workflow-definitions/{_segment(name)}/publish"
        return self._one(WorkflowDefinition, "POST", path, _body(version=version))

    def rollback_workflow(self, name: str, version: int | None = None) -> WorkflowDefinition:
        """Re-publish an earlier version (default: the one published before the current)."""
        path = f"metadata/workflow-definitions/{_segment(name)}/rollback"
        return self._one(WorkflowDefinition, "POST", path, _body(version=version))

    def delete_workflow(self, name: str) -> None:
        self.request("DELETE", f"metadata/workflow-definitions/{_segment(name)}")

    def _posted(self, cls: type[M], path: str, document: files.Document) -> M:
        response = self.request("POST", path, content=document.content(), content_type=document.content_type)
        return cls.from_json(response.json())

    # --- executions (SPEC §6) --------------------------------------------------

    def start(
        self,
        name: str,
        input: dict[str, Any] | None = None,
        *,
        version: int | None = None,
        correlation_id: str | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
    ) -> Execution:
        """Start an execution (of the published version unless ``version``).
        With an ``idempotency_key`` already used, the existing execution comes
        back with ``created`` False."""
        body = start_body(
            name,
            input,
            version=version,
            correlation_id=correlation_id,
            idempotency_key=idempotency_key,
            priority=priority,
        )
        response = self.request("POST", "executions", json=body)
        execution = Execution.from_json(response.json())
        execution.created = response.status_code == 201
        return execution

    def start_many(self, starts: Iterable[dict[str, Any]]) -> list[StartAnswer]:
        """Up to 100 starts in one request (``start_body(...)`` dicts, or
        bodies as the API takes them); one answer each, in order. A refused
        start (``not answer.ok``) spoils none of the others."""
        answer = self._json("POST", "executions/batch", {"executions": list(starts)})
        return [StartAnswer.from_json(item) for item in answer["results"]]

    def get(self, execution_id: str, *, include_tasks: bool = True, all_tasks: bool = False) -> Execution:
        """An execution with its current run's tasks (every attempt). The
        server shows at most its NODE_FLOW_EXECUTION_VIEW_TASKS (1,000) and
        sets ``tasks_next``; ``all_tasks`` fetches the rest too. Without
        ``include_tasks``, the execution alone (a lighter read)."""
        params = None if include_tasks else {"includeTasks": "false"}
        execution = self._one(Execution, "GET", f"executions/{_segment(execution_id)}", params=params)
        if all_tasks and execution.tasks_next:
            execution.tasks.extend(self.list_tasks(execution_id, cursor=execution.tasks_next, page_size=1000))
            execution.tasks_next = None
        return execution

    def tasks_page(
        self,
        execution_id: str,
        *,
        status: str | None = None,
        path: str | None = None,
        path_prefix: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page[Task]:
        """One page (``limit`` up to 1000, default 100) of the current run's
        tasks in the order they were scheduled: those in ``status``, at
        ``path`` (``fan[3].charge``) or under ``path_prefix`` (``fan[3].``)."""
        params = _body(status=status, path=path, pathPrefix=path_prefix, cursor=cursor, limit=limit)
        answer = self._json("GET", f"executions/{_segment(execution_id)}/tasks", params=params)
        return Page([Task.from_json(item) for item in answer["results"]], answer.get("next"), answer)

    def list_tasks(
        self,
        execution_id: str,
        *,
        status: str | None = None,
        path: str | None = None,
        path_prefix: str | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Task]:
        """``tasks_page`` after ``tasks_page``: at most ``limit`` tasks (None: all)."""

        def page(cursor: str | None, size: int) -> Page[Task]:
            return self.tasks_page(
                execution_id, status=status, path=path, path_prefix=path_prefix, cursor=cursor, limit=size
            )

        return _paged(page, page_size=page_size, cursor=cursor, limit=limit)

    def wait(
        self,
        execution_id: str,
        *,
        timeout: float | None = 60.0,
        until: Callable[[Execution], bool] | None = None,
        max_interval: float = WAIT_MAX_S,
    ) -> Execution:
        """Read the execution until it has ended (or ``until(execution)`` is
        true), pausing 50 ms at first and longer each time up to
        ``max_interval``; raise ``WaitTimeout`` after ``timeout`` seconds
        (None: no limit). A server that is briefly unreachable or
        unavailable is waited for too."""
        done = until or (lambda execution: execution.ended)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, execution = WAIT_FIRST_S, None
        while True:
            try:
                # Without ``until``, only the status matters until the end: read the tasks once, then.
                execution = self.get(execution_id, include_tasks=until is not None)
                if done(execution):
                    return execution if until is not None else self.get(execution_id)
            except (ConnectionFailed, Unavailable):
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                status = execution.status if execution else "unknown"
                raise WaitTimeout(f"execution {execution_id} still {status} after {timeout} s", execution=execution)
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * WAIT_FACTOR, max_interval)

    def terminate(self, execution_id: str, reason: str = "") -> Execution:
        """Cancel every open task and end the execution TERMINATED (cascading to children)."""
        return self._action(execution_id, "terminate", {"reason": reason})

    def pause(self, execution_id: str) -> Execution:
        return self._action(execution_id, "pause")

    def resume(self, execution_id: str) -> Execution:
        return self._action(execution_id, "resume")

    def retry(self, execution_id: str) -> Execution:
        """Run an ended execution again from its failed task."""
        return self._action(execution_id, "retry")

    def restart(self, execution_id: str) -> Execution:
        """Run an ended execution again from the beginning (same id, a new ``run``)."""
        return self._action(execution_id, "restart")

    def decide(self, execution_id: str) -> Execution:
        """Evaluate the execution now."""
        return self._action(execution_id, "decide")

    def _action(self, execution_id: str, action: str, body: dict[str, Any] | None = None) -> Execution:
        return self._one(Execution, "POST", f"executions/{_segment(execution_id)}/{action}", body or {})

    def executions_page(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        correlation_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page[Execution]:
        """One page of executions, newest first (without their tasks);
        ``page.next`` is the cursor of the next one."""
        params = _body(status=status, name=name, correlationId=correlation_id, cursor=cursor, limit=limit)
        answer = self._json("GET", "executions", params=params)
        return Page([Execution.from_json(item) for item in answer["results"]], answer.get("next"), answer)

    def list_executions(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        correlation_id: str | None = None,
        page_size: int = 50,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Execution]:
        """Executions, newest first, matching every filter given, fetched a
        page (``page_size``, up to 500) at a time as the iteration goes; at
        most ``limit`` of them (None: all)."""

        def page(cursor: str | None, size: int) -> Page[Execution]:
            return self.executions_page(
                status=status, name=name, correlation_id=correlation_id, cursor=cursor, limit=size
            )

        return _paged(page, page_size=page_size, cursor=cursor, limit=limit)

    # --- signals: messages, webhooks, HUMAN tasks -------------------------------

    def send_message(self, execution_id: str, message: Any) -> int:
        """Post a message for the execution's PULL_WORKFLOW_MESSAGES tasks; its id."""
        return int(self._json("POST", f"executions/{_segment(execution_id)}/messages", message)["id"])

    def call_webhook(self, name: str, body: dict[str, Any]) -> WebhookDelivery:
        """Deliver an inbound webhook: it completes every waiting
        WAIT_FOR_WEBHOOK task whose *task name* (its ``name`` in the workflow,
        not its reference name) is ``name`` and whose ``matches`` the body
        satisfies."""
        return self._one(WebhookDelivery, "POST", f"webhooks/{_segment(name)}", body)

    def complete_human(
        self,
        task_id: str,
        output: dict[str, Any] | None = None,
        *,
        status: str = "COMPLETED",
        reason: str | None = None,
    ) -> Task:
        """Complete (or, with ``status`` FAILED / FAILED_WITH_TERMINAL_ERROR,
        fail) a HUMAN task: a result without a lease (an admin or developer key)."""
        body = _body(status=status, outputData=output or {}, reasonForIncompletion=reason)
        return self._one(Task, "POST", f"tasks/{_segment(task_id)}/result", body)

    def human_tasks(self, execution_id: str, reference: str | None = None) -> list[Task]:
        """The execution's HUMAN tasks waiting for a person (by reference name or path, if given)."""
        tasks = self.get(execution_id).open_tasks("HUMAN")
        return [t for t in tasks if reference is None or reference in (t.reference_task_name, t.path)]

    # --- the worker's half, for scripts (workers: nodeflow_worker) ---------------

    def poll(self, task_type: str, *, worker_id: str = "", count: int = 1, wait_s: float = 0) -> list[LeasedTask]:
        """Lease up to ``count`` ready tasks of a queue, long-polling up to
        ``wait_s`` (0-30) for one. A real worker is ``nodeflow_worker.Worker``,
        which also heartbeats and reports."""
        # An empty workerId is refused (400), an absent one defaults to "".
        body = _body(workerId=worker_id or None, count=count, waitSeconds=wait_s)
        return [LeasedTask.from_json(item) for item in self._json("POST", f"tasks/poll/{_segment(task_type)}", body)]

    def report_result(
        self,
        task_id: str,
        *,
        lease_token: str,
        status: str = "COMPLETED",
        output: dict[str, Any] | None = None,
        reason: str | None = None,
        callback_after_s: float | None = None,
        next: dict[str, Any] | None = None,
    ) -> Task:
        """Report a leased task's result (409 ``Conflict`` for a stale lease).
        ``next`` (``{"workerId", "count", "taskType"}``) leases the next tasks
        in the same request: they are in ``task.raw["next"]``."""
        body = _body(
            leaseToken=lease_token,
            status=status,
            outputData=output or {},
            reasonForIncompletion=reason,
            callbackAfterSeconds=callback_after_s,
            next=next,
        )
        return self._one(Task, "POST", f"tasks/{_segment(task_id)}/result", body)

    def heartbeat(self, task_id: str, lease_token: str, progress: Any = None) -> dict[str, Any]:
        """Extend a lease; the answer carries the new ``leaseExpiresAt``."""
        body = _body(leaseToken=lease_token, progress=progress)
        return self._json("POST", f"tasks/{_segment(task_id)}/heartbeat", body)

    # --- diagnostics and controls (SPEC §8–§9) ---------------------------------

    def queues(self) -> list[Queue]:
        return self._list(Queue, "queues")

    def queue(self, task_type: str) -> Queue:
        """One queue's depth (waiting) and tasks in flight."""
        return self._one(Queue, "GET", f"queues/{_segment(task_type)}/depth")

    def queue_workers(self, task_type: str | None = None) -> list[QueueWorker]:
        """Workers and when each last polled each queue."""
        return self._list(QueueWorker, "queues/workers", params=_body(taskType=task_type))

    def semaphores(self) -> list[Semaphore]:
        return self._list(Semaphore, "semaphores")

    def semaphore(self, name: str) -> Semaphore:
        """One semaphore with its holders."""
        return self._one(Semaphore, "GET", f"semaphores/{_segment(name)}")

    def set_semaphore(self, name: str, permits: int) -> Semaphore:
        return self._one(Semaphore, "PUT", f"semaphores/{_segment(name)}", {"permits": permits})

    def delete_semaphore(self, name: str) -> None:
        self.request("DELETE", f"semaphores/{_segment(name)}")

    def quotas(self) -> Quotas:
        return self._one(Quotas, "GET", "quotas")

    def set_quotas(self, quotas: dict[str, Any]) -> Quotas:
        """Replace the namespace's quotas (a quota left out is unlimited)."""
        return self._one(Quotas, "PUT", "quotas", quotas)

    def schedules(self) -> list[Schedule]:
        return self._list(Schedule, "schedules")

    def schedule(self, name: str) -> Schedule:
        return self._one(Schedule, "GET", f"schedules/{_segment(name)}")

    def put_schedule(self, schedule: dict[str, Any]) -> Schedule:
        """Create or replace the schedule named ``schedule["name"]``."""
        return self._one(Schedule, "POST", "schedules", schedule)

    def pause_schedule(self, name: str) -> Schedule:
        return self._one(Schedule, "POST", f"schedules/{_segment(name)}/pause", {})

    def resume_schedule(self, name: str) -> Schedule:
        return self._one(Schedule, "POST", f"schedules/{_segment(name)}/resume", {})

    def delete_schedule(self, name: str) -> None:
        self.request("DELETE", f"schedules/{_segment(name)}")

    def breakers(self) -> list[Breaker]:
        """Circuit breakers, per process, as each last reported them."""
        return self._list(Breaker, "breakers")

    def secrets(self) -> list[str]:
        """The namespace's secret names (never their values)."""
        return [item["name"] for item in self._json("GET", "secrets")]

    def set_secret(self, name: str, value: str) -> None:
        self.request("PUT", f"secrets/{_segment(name)}", json={"value": value})

    def delete_secret(self, name: str) -> None:
        self.request("DELETE", f"secrets/{_segment(name)}")


def _paged(
    fetch: Callable[[str | None, int], Page[Any]], *, page_size: int, cursor: str | None, limit: int | None
) -> Iterator[Any]:
    """The items of page after page (``fetch(cursor, size)``), at most ``limit``."""
    count = 0
    while limit is None or count < limit:
        page = fetch(cursor, page_size if limit is None else min(page_size, limit - count))
        yield from page.results
        count += len(page.results)
        if page.next is None:
            return
        cursor = page.next


def _params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    return {key: value for key, value in params.items() if value is not None} if params else None


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
