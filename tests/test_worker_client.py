"""The worker SDK's ``Client`` sends its own calls (polls, heartbeats,
results, starts) through its transport without httpx's client, and must
answer as httpx's client did: the same URL under a path prefix and an
escaped namespace, the key and a JSON body, ``StaleLease`` for 409, httpx's
``HTTPStatusError`` for any other refusal and httpx's transport errors,
each carrying its request. Against a real HTTP server on loopback."""

from __future__ import annotations

import json
import re
import socket
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from nodeflow_worker import Client, StaleLease
from nodeflow_worker.backoff import is_transient
from tests.worker_helpers import leased_task, loopback_server


class _Server(BaseHTTPRequestHandler):
    """Records each request and answers what the test queued for its path
    (200 and an empty list otherwise)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.seen.append((self.command, self.path, dict(self.headers), body))  # type: ignore[attr-defined]  # set by the fixture
        status, answer = self.server.answers.get(self.path, (200, []))  # type: ignore[attr-defined]  # set by the fixture
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    # seen: (method, path, headers, body) of each request; answers: path → (status, JSON answer)
    with loopback_server(_Server, seen=[], answers={}) as httpd:
        yield httpd


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_it_keeps_the_base_urls_path_and_the_namespace(server):
    server.answers["/api/v1/ns/team%201/tasks/results"] = (200, {"results": []})
    server.answers["/api/v1/ns/team%201/tasks/t-1/result"] = (200, {"taskId": "t-1"})
    client = Client(_url(server) + "/api/", "nf_key", namespace="team 1")
    try:
        client.poll("q", worker_id="w", count=2, wait_s=0)
        client.post_results([])
        client.result(leased_task("t-1"), "COMPLETED", output={"é": 1})
        client.execution("e-1")
    finally:
        client.close()
    paths = [(method, path) for method, path, _, _ in server.seen]
    assert paths == [
        ("POST", "/api/v1/ns/team%201/tasks/poll/q"),
        ("POST", "/api/v1/ns/team%201/tasks/results"),
        ("POST", "/api/v1/ns/team%201/tasks/t-1/result"),
        ("GET", "/api/v1/ns/team%201/executions/e-1"),
    ]
    _, _, headers, body = server.seen[2]
    assert headers["x-api-key"] == "nf_key" and headers["Content-Type"] == "application/json"
    assert headers["Host"] == f"127.0.0.1:{server.server_address[1]}"
    assert json.loads(body)["outputData"] == {"é": 1}
    assert json.loads(server.seen[0][3]) == {"count": 2, "waitSeconds": 0, "workerId": "w"}


def test_a_poll_without_a_worker_id_sends_none(server):
    """The server refuses an empty id; a poll without one names no worker."""
    client = Client(_url(server), "nf_key")
    try:
        assert client.poll("work") == []
        client.poll("work", worker_id="w1")
    finally:
        client.close()
    assert [json.loads(body) for _, _, _, body in server.seen] == [
        {"count": 1, "waitSeconds": 0},
        {"count": 1, "waitSeconds": 0, "workerId": "w1"},
    ]


def test_a_409_is_a_stale_lease_with_the_servers_reason(server):
    server.answers["/v1/ns/default/tasks/t-1/result"] = (409, {"message": "lease lost", "taskStatus": "TIMED_OUT"})
    client = Client(_url(server), "nf_key")
    try:
        with pytest.raises(StaleLease) as caught:
            client.complete(leased_task("t-1"))
    finally:
        client.close()
    assert str(caught.value) == "lease lost" and caught.value.task_status == "TIMED_OUT"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_any_other_refusal_is_httpxs_status_error_with_the_answer_and_the_request(server, status):
    server.answers["/v1/ns/default/executions"] = (status, {"error": "NO", "message": "because"})
    client = Client(_url(server), "nf_key")
    try:
        with pytest.raises(httpx.HTTPStatusError) as caught:
            client.start("flow", {"a": 1})
    finally:
        client.close()
    error = caught.value
    assert error.response.status_code == status and error.response.json()["message"] == "because"
    assert str(error.request.url) == f"{_url(server)}/v1/ns/default/executions"
    assert json.loads(error.request.content) == {"name": "flow", "input": {"a": 1}}
    assert is_transient(error) == (status in (429, 500, 503))


def test_an_unreachable_server_is_httpxs_transient_connect_error_with_its_request():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", "nf_key")
    try:
        with pytest.raises(httpx.ConnectError) as caught:
            client.poll("q", count=1)
    finally:
        client.close()
    assert is_transient(caught.value)
    assert str(caught.value.request.url) == f"http://127.0.0.1:{port}/v1/ns/default/tasks/poll/q"


def test_a_start_answers_the_servers_json(server):
    server.answers["/v1/ns/default/executions"] = (201, {"id": "e-1", "status": "RUNNING"})
    client = Client(_url(server), "nf_key")
    try:
        assert client.start("flow") == {"id": "e-1", "status": "RUNNING"}
    finally:
        client.close()


def test_a_url_that_is_not_http_is_refused_when_the_client_is_made():
    with pytest.raises(httpx.UnsupportedProtocol, match=re.escape("ftp://example.invalid")):
        Client("ftp://example.invalid", "nf_key")
