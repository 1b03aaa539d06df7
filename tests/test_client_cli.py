"""The command line (``python -m nodeflow_client``) against a live server, as
an operator runs it from a shell: each call a process of its own, reading
NF_URL and NF_API_KEY, printing JSON on stdout and the server's error body
on stderr, its exit code telling success, refusal, usage, an unreachable
server, a wait that gave up and an execution that did not complete apart.
One server for the module (tests/client_live.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from executions import leases
from nodeflow_client import cli
from nodeflow_worker import Task as WorkerTask
from nodeflow_worker import Worker
from tests.client_live import PYTHON, ROOT, LiveServer


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = LiveServer("cli")
    try:
        live.start()
        yield live
    finally:  # a server that failed to start leaves its database and files behind otherwise
        live.stop()


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error(self) -> dict[str, Any]:
        return json.loads(self.stderr.strip().splitlines()[-1])


@pytest.fixture
def nodeflow(server):
    """nodeflow(*args, stdin=None, env=None) → Run: the command line in a process of its own."""

    def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Run:
        environment = {
            **{k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "NF_NAMESPACE")},
            "NF_URL": server.url,
            "NF_API_KEY": server.key("admin"),
            **(env or {}),
        }
        done = subprocess.run(
            [PYTHON, "-m", "nodeflow_client", *args],
            cwd=ROOT,
            env=environment,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def nodeflow_here(server, capsys, monkeypatch):
    """nodeflow_here(*args) → Run: the command line called in this process
    (the same code, without a process's start-up: for the tests that run many)."""
    monkeypatch.setenv("NF_URL", server.url)
    monkeypatch.setenv("NF_API_KEY", server.key("admin"))
    monkeypatch.delenv("NF_NAMESPACE", raising=False)
    return lambda *args: in_process(capsys, *args)


@pytest.fixture
def worker(server) -> Iterator[Worker]:
    worker = Worker(server.url, server.key("worker"), poll_wait_s=0.5, concurrency=4)
    yield worker
    assert worker.stop(timeout=15)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def idle_workflow(nodeflow, tmp_path) -> str:
    """A workflow whose one task nobody polls: it stays RUNNING until acted on."""
    flow = unique("idle")
    path = tmp_path / f"{flow}.json"
    path.write_text(json.dumps({"name": flow, "tasks": [{"name": unique("nobody"), "taskReferenceName": "only"}]}))
    assert nodeflow("workflow", "put", str(path)).code == 0
    return flow


def test_the_readme_walk_through_from_a_shell(nodeflow, worker, tmp_path):
    charge, notify, flow = unique("charge"), unique("notify"), unique("checkout")
    (tmp_path / "charge.json").write_text(
        json.dumps({"name": charge, "retryCount": 5, "retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 2})
    )
    (tmp_path / "notify.yaml").write_text(f"name: {notify}\nretryCount: 1\n")
    put = nodeflow("taskdef", "put", str(tmp_path / "charge.json"), str(tmp_path / "notify.yaml"))
    assert put.code == 0, put.stderr
    assert [(d["name"], d["retryCount"]) for d in put.json] == [(charge, 5), (notify, 1)]
    got = nodeflow("taskdef", "get", charge)
    assert got.code == 0 and got.json["retryDelaySeconds"] == 2.0 and got.json["startToCloseTimeout"] == 3600.0

    (tmp_path / "checkout.yaml").write_text(
        textwrap.dedent(f"""\
        name: {flow}
        tasks:
          - name: {charge}
            taskReferenceName: charge
            inputParameters:
              amount: ${{workflow.input.amount}}
          - name: {notify}
            taskReferenceName: notify
            optional: true
            inputParameters:
              chargeId: ${{charge.output.id}}
        """)
    )
    registered = nodeflow("workflow", "put", str(tmp_path / "checkout.yaml"))
    assert registered.code == 0 and registered.json[0]["version"] == 1 and registered.json[0]["published"]
    assert nodeflow("workflow", "versions", flow).json[0]["version"] == 1

    @worker.task(charge)
    def do_charge(task: WorkerTask) -> dict:
        return {"id": f"ch_{task.input['amount']}"}

    @worker.task(notify)
    def do_notify(task: WorkerTask) -> dict:
        return {"sent": True}

    (tmp_path / "input.json").write_text('{"amount": 42}')
    key = unique("order")
    started = nodeflow("start", flow, "--input", f"@{tmp_path / 'input.json'}", "--idempotency-key", key)
    assert started.code == 0, started.stderr
    execution = started.json
    assert execution["status"] == "RUNNING" and execution["idempotencyKey"] == key
    assert nodeflow("start", flow, "--input", '{"amount": 42}', "--idempotency-key", key).json["id"] == execution["id"]

    worker.start()
    waited = nodeflow("wait", execution["id"], "--timeout", "20")
    assert waited.code == cli.EXIT_OK, waited.stderr
    assert waited.json["status"] == "COMPLETED"
    charged = next(t for t in waited.json["tasks"] if t["referenceTaskName"] == "charge")
    assert charged["outputData"] == {"id": "ch_42"}

    # The same, waiting in the start; the input from stdin; compact output for a pipe.
    again = nodeflow("start", flow, "--input", "-", "--wait", "--timeout", "20", "--compact", stdin='{"amount": 7}')
    assert again.code == cli.EXIT_OK, again.stderr
    assert len(again.stdout.strip().splitlines()) == 1 and again.json["status"] == "COMPLETED"
    assert nodeflow("get", again.json["id"]).json["input"] == {"amount": 7}


def test_a_refusal_exits_1_with_the_servers_error_body_on_stderr(nodeflow, server, tmp_path):
    missing = nodeflow("get", "no-such-execution")
    assert missing.code == cli.EXIT_REFUSED and missing.stdout == ""
    assert missing.error == {
        "error": "NOT_FOUND",
        "message": "execution 'no-such-execution' does not exist",
        "status": 404,
    }
    (tmp_path / "bad.json").write_text(json.dumps({"name": unique("bad"), "retryCount": 101}))
    invalid = nodeflow("taskdef", "put", str(tmp_path / "bad.json"))
    assert invalid.code == cli.EXIT_REFUSED
    assert (invalid.error["error"], invalid.error["field"], invalid.error["status"]) == (
        "VALIDATION_ERROR",
        "retryCount",
        400,
    )
    flow = idle_workflow(nodeflow, tmp_path)
    execution = nodeflow("start", flow).json
    assert nodeflow("terminate", execution["id"], "--reason", "done").json["status"] == "TERMINATED"
    conflict = nodeflow("terminate", execution["id"])
    assert conflict.code == cli.EXIT_REFUSED and conflict.error["error"] == "CONFLICT"
    forbidden = nodeflow("workflow", "list", env={"NF_API_KEY": server.key("worker")})
    assert forbidden.code == cli.EXIT_REFUSED and forbidden.error["status"] == 403


def in_process(capsys, *args: str) -> Run:
    """The command line called here: for what is refused before any request."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return Run(code, out.out, out.err)


def test_usage_errors_exit_2(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NF_URL", "http://127.0.0.1:9")  # never reached
    monkeypatch.setenv("NF_API_KEY", "nf_x")
    assert in_process(capsys).code == cli.EXIT_USAGE  # no command
    assert in_process(capsys, "start").code == cli.EXIT_USAGE  # no workflow name
    assert in_process(capsys, "list", "--status", "SLEEPING").code == cli.EXIT_USAGE
    bad_json = in_process(capsys, "start", "x", "--input", "{not json")
    assert bad_json.code == cli.EXIT_USAGE and bad_json.error["error"] == "USAGE"
    assert in_process(capsys, "start", "x", "--input", "[1]").code == cli.EXIT_USAGE  # not an object
    assert in_process(capsys, "start", "x", "--input", f"@{tmp_path / 'missing.json'}").code == cli.EXIT_USAGE
    assert in_process(capsys, "taskdef", "put", str(tmp_path / "missing.json")).code == cli.EXIT_USAGE
    (tmp_path / "broken.json").write_text("{")
    assert in_process(capsys, "workflow", "put", str(tmp_path / "broken.json")).code == cli.EXIT_USAGE
    monkeypatch.setenv("NF_API_KEY", "")
    no_key = in_process(capsys, "get", "x")
    assert no_key.code == cli.EXIT_USAGE and "NF_API_KEY" in no_key.error["message"]


def test_complete_human_needs_a_task_or_an_execution(nodeflow):
    run = nodeflow("complete-human")
    assert run.code == cli.EXIT_USAGE and "--execution" in run.error["message"]


def test_options_go_before_or_after_the_command(nodeflow, server):
    assert nodeflow("--compact", "health").stdout == nodeflow("health", "--compact").stdout
    assert nodeflow("health", "--url", "http://127.0.0.1:9").code == cli.EXIT_UNREACHABLE


def test_an_unreachable_server_exits_3(nodeflow):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = nodeflow("--url", f"http://127.0.0.1:{port}", "health")
    assert run.code == cli.EXIT_UNREACHABLE and run.error["error"] == "CONNECTION_FAILED"


def test_wait_exits_4_when_it_gives_up_and_5_when_the_execution_did_not_complete(nodeflow, tmp_path):
    flow = idle_workflow(nodeflow, tmp_path)
    execution = nodeflow("start", flow).json
    gave_up = nodeflow("wait", execution["id"], "--timeout", "0.3")
    assert gave_up.code == cli.EXIT_WAIT_TIMEOUT and gave_up.json["status"] == "RUNNING"
    assert gave_up.error["error"] == "WAIT_TIMEOUT"
    nodeflow("terminate", execution["id"])
    ended = nodeflow("wait", execution["id"])
    assert ended.code == cli.EXIT_NOT_COMPLETED and ended.json["status"] == "TERMINATED"


def test_actions_retry_restart_pause_resume(nodeflow_here, tmp_path):
    flow = idle_workflow(nodeflow_here, tmp_path)
    execution = nodeflow_here("start", flow, "--correlation-id", "c-9", "--priority", "3").json
    assert (execution["correlationId"], execution["priority"]) == ("c-9", 3)
    assert nodeflow_here("pause", execution["id"]).json["status"] == "PAUSED"
    assert nodeflow_here("resume", execution["id"]).json["status"] == "RUNNING"
    assert nodeflow_here("terminate", execution["id"], "--reason", "stop").json["reasonForIncompletion"] == "stop"
    (canceled,) = nodeflow_here("tasks", execution["id"], "--status", "CANCELED").json
    assert canceled["referenceTaskName"] == "only"
    page = nodeflow_here("tasks", execution["id"], "--page", "--page-size", "1").json
    assert [t["taskId"] for t in page["results"]] == [canceled["taskId"]] and page["next"] is None
    bare = nodeflow_here("get", execution["id"], "--no-tasks").json
    assert "tasks" not in bare and bare["status"] == "TERMINATED"
    retried = nodeflow_here("retry", execution["id"])
    assert retried.code == 0 and retried.json["status"] == "RUNNING"
    nodeflow_here("terminate", execution["id"])
    restarted = nodeflow_here("restart", execution["id"]).json
    assert (restarted["status"], restarted["run"]) == ("RUNNING", execution["run"] + 1)


def test_list_pages_through_the_filters(nodeflow_here, tmp_path):
    flow = idle_workflow(nodeflow_here, tmp_path)
    starts = json.dumps([{"name": flow, "input": {"i": i}} for i in range(5)] + [{"name": unique("nope")}])
    batch = nodeflow_here("start-many", starts)
    assert batch.code == 0 and [a["status"] for a in batch.json] == [201] * 5 + [404]
    ids = [a["id"] for a in batch.json[:5]]
    listed = nodeflow_here("list", "--workflow", flow, "--status", "RUNNING", "--page-size", "2", "--all")
    assert listed.code == 0 and sorted(e["id"] for e in listed.json) == sorted(ids)
    assert len(nodeflow_here("list", "--workflow", flow, "--limit", "3", "--page-size", "2").json) == 3
    page = nodeflow_here("list", "--workflow", flow, "--page", "--page-size", "3").json
    assert len(page["results"]) == 3 and page["next"]
    rest = nodeflow_here("list", "--workflow", flow, "--page", "--page-size", "3", "--cursor", page["next"]).json
    assert len(rest["results"]) == 2 and rest["next"] is None
    assert nodeflow_here("list", "--workflow", flow, "--status", "COMPLETED").json == []


def test_a_message_a_webhook_and_a_human_completion(nodeflow, tmp_path):
    flow, hook = unique("signals"), unique("payment_received")
    definition = {
        "name": flow,
        "tasks": [
            {"name": unique("approval"), "taskReferenceName": "approve", "type": "HUMAN"},
            {
                "name": unique("inbox"),
                "taskReferenceName": "inbox",
                "type": "PULL_WORKFLOW_MESSAGES",
                "inputParameters": {"batchSize": 1},
            },
            {
                "name": hook,
                "taskReferenceName": "paid",
                "type": "WAIT_FOR_WEBHOOK",
                "inputParameters": {"matches": {"$.order": "${workflow.input.order}"}},
            },
        ],
    }
    assert nodeflow("workflow", "put", "-", stdin=json.dumps(definition)).code == 0
    execution = nodeflow("start", flow, "--input", '{"order": "o-3"}').json
    human = nodeflow("complete-human", "--execution", execution["id"], "--ref", "approve", "--output", '{"ok": true}')
    assert human.code == 0, human.stderr
    assert human.json["status"] == "COMPLETED" and human.json["outputData"] == {"ok": True}
    none_left = nodeflow("complete-human", "--execution", execution["id"])
    assert none_left.code == cli.EXIT_REFUSED and none_left.error["error"] == "NOT_FOUND"
    posted = nodeflow("message", execution["id"], '{"note": "hi"}')
    assert posted.code == 0 and posted.json["id"] > 0
    delivered = {"matched": 0}
    for _ in range(50):  # until the webhook task is waiting (after the message is pulled)
        delivered = nodeflow("webhook", hook, '{"order": "o-3"}').json
        if delivered["matched"]:
            break
    assert delivered["matched"] == 1
    ended = nodeflow("wait", execution["id"], "--timeout", "20")
    assert ended.code == cli.EXIT_OK, ended.stdout
    outputs = {t["referenceTaskName"]: t["outputData"] for t in ended.json["tasks"]}
    assert outputs == {"approve": {"ok": True}, "inbox": {"messages": [{"note": "hi"}]}, "paid": {"order": "o-3"}}


def test_controls_from_a_shell(nodeflow_here, tmp_path):
    flow = idle_workflow(nodeflow_here, tmp_path)
    nodeflow_here("start", flow)
    queues = nodeflow_here("queue", "list").json
    assert any(q["depth"] >= 1 for q in queues)
    assert nodeflow_here("queue", "depth", queues[0]["taskType"]).json["taskType"] == queues[0]["taskType"]
    semaphore = unique("erp")
    assert nodeflow_here("semaphore", "put", semaphore, "4").json == {
        "name": semaphore,
        "permits": 4,
        "held": 0,
        "holders": [],
    }
    assert semaphore in {s["name"] for s in nodeflow_here("semaphore", "list").json}
    assert nodeflow_here("semaphore", "delete", semaphore).code == 0
    assert nodeflow_here("quotas", "get").json["maxSchedules"] is None
    assert nodeflow_here("breakers").json == []
    assert nodeflow_here("health", "--compact").stdout.strip() == '{"status":"ok","database":"ok"}'
    # A namespace the admin key is not in: refused (403), not created.
    elsewhere = nodeflow_here("-n", unique("other"), "queue", "list")
    assert elsewhere.code == cli.EXIT_REFUSED and elsewhere.error["error"] == "FORBIDDEN"


def test_a_lease_token_is_never_read_as_an_option(monkeypatch):
    """base64url may begin with "-": argparse took such a token for an option
    (1 poll in 64 failed `nodeflow task heartbeat … --lease TOKEN` in CI)."""
    monkeypatch.setattr(leases.secrets, "token_urlsafe", lambda n: "-" + "A" * (4 * n // 3 - 1))
    token = leases.new_token()
    assert len(token) == 24 and not token.startswith("-")
    for command in ("heartbeat", "result"):
        args = cli.parser().parse_args(["task", command, "t-1", "--lease", token])
        assert args.lease == token


def test_playing_the_worker_from_a_shell(nodeflow, tmp_path):
    first, second, flow = unique("first"), unique("second"), unique("by_hand")
    definition = {
        "name": flow,
        "tasks": [
            {"name": first, "taskReferenceName": "one", "inputParameters": {"n": "${workflow.input.n}"}},
            {"name": second, "taskReferenceName": "two", "inputParameters": {"m": "${one.output.m}"}},
        ],
    }
    assert nodeflow("workflow", "put", "-", stdin=json.dumps(definition)).code == 0
    execution = nodeflow("start", flow, "--input", '{"n": 1}').json
    (leased,) = nodeflow("task", "poll", first, "--worker-id", "sh", "--count", "10", "--wait", "5").json
    assert leased["inputData"] == {"n": 1} and leased["leaseToken"]
    beat = nodeflow("task", "heartbeat", leased["taskId"], "--lease", leased["leaseToken"])
    assert beat.code == 0 and beat.json["leaseExpiresAt"]
    # Report, and lease the next task (of the same type: none; of the second's: by polling it).
    done = nodeflow("task", "result", leased["taskId"], "--lease", leased["leaseToken"], "--output", '{"m": 2}')
    assert done.code == 0 and done.json["status"] == "COMPLETED"
    stale = nodeflow("task", "result", leased["taskId"], "--lease", leased["leaseToken"])
    assert stale.code == cli.EXIT_REFUSED and stale.error["error"] == "CONFLICT"
    (then,) = nodeflow("task", "poll", second, "--wait", "5").json
    assert then["inputData"] == {"m": 2}
    assert nodeflow("task", "result", then["taskId"], "--lease", then["leaseToken"]).code == 0
    assert nodeflow("wait", execution["id"], "--timeout", "20").code == cli.EXIT_OK
