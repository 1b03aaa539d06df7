"""Request bodies at the WSGI edge (``nodeflow.wsgi_bodies``), through the
WSGI application in process:

- a body sent chunked (``Transfer-Encoding: chunked``, no
  ``Content-Length``) is read whole: Django alone read it as empty, and a
  start sent so was refused with "name: This field is required";
- a body refused as too large is read and dropped before the 413, up to
  16 times the limit, so the client is not reset while it sends.

The real servers: tests/test_production_server.py (granian) and
tests/test_embedded_server.py (waitress), with ``check_a_chunked_start``."""

from __future__ import annotations

import http.client
import io
import json
import sys

import pytest

from executions.models import Execution
from nodeflow.wsgi import application

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "chunked_flow"
# What a chunked start starts (path under /v1/ns/default/, body).
DEFINITIONS = [
    ("metadata/task-definitions", {"name": "chunked_task"}),
    ("metadata/workflow-definitions", {"name": FLOW, "tasks": [{"name": "chunked_task", "taskReferenceName": "t"}]}),
]


@pytest.fixture
def flow(api):
    for path, body in DEFINITIONS:
        assert api.post(path, body).status_code == 201
    return api


def _environ(body: bytes | io.BytesIO, key: str, *, chunked: bool = True, terminated: bool = True) -> dict:
    stream = body if isinstance(body, io.BytesIO) else io.BytesIO(body)
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/v1/ns/default/executions",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "HTTP_X_API_KEY": key,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": stream,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": terminated,
    }
    if chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    else:
        environ["CONTENT_LENGTH"] = str(len(stream.getvalue()))
    return environ


def _call(environ: dict) -> tuple[int, dict]:
    answer: dict = {}

    def start_response(status: str, headers: list, exc_info=None) -> None:
        answer["status"] = int(status.split()[0])

    body = b"".join(application(environ, start_response))
    return answer["status"], json.loads(body)


def _start_body(size: int = 10) -> bytes:
    return json.dumps({"name": FLOW, "input": {"x": "a" * size}}).encode()


def test_a_chunked_start_is_read_whole(flow):
    status, body = _call(_environ(_start_body(), flow.key))
    assert status == 201, body
    assert Execution.objects.get(pk=body["id"]).input == {"x": "a" * 10}


def test_a_body_with_its_length_is_left_as_it_came(flow):
    status, body = _call(_environ(_start_body(), flow.key, chunked=False))
    assert status == 201, body


def test_a_chunked_body_over_the_limit_gets_413_and_starts_nothing(flow, settings):
    settings.NODE_FLOW_MAX_BODY_BYTES = 1000
    status, body = _call(_environ(_start_body(2000), flow.key))
    assert status == 413 and body["error"] == "PAYLOAD_TOO_LARGE", body
    assert not Execution.objects.filter(name=FLOW).exists()


@pytest.mark.parametrize("chunked", [False, True], ids=["with its length", "chunked"])
def test_a_body_too_large_is_read_before_the_413(flow, settings, chunked):
    """The server closes the connection after its answer: a body left
    unread resets it, and the client sees a broken pipe, not the 413."""
    settings.NODE_FLOW_MAX_BODY_BYTES = 1000
    stream = io.BytesIO(_start_body(5000))
    status, body = _call(_environ(stream, flow.key, chunked=chunked))
    assert status == 413 and body["error"] == "PAYLOAD_TOO_LARGE", body
    assert stream.tell() == len(stream.getvalue())  # read to its end
    assert not Execution.objects.filter(name=FLOW).exists()


def test_a_body_over_sixteen_times_the_limit_is_left_unread(flow, settings):
    settings.NODE_FLOW_MAX_BODY_BYTES = 100
    stream = io.BytesIO(_start_body(5000))
    status, _ = _call(_environ(stream, flow.key, chunked=False))
    assert status == 413 and stream.tell() == 0


def test_a_server_that_does_not_end_its_input_is_not_read_past_its_length(flow):
    """Without ``wsgi.input_terminated`` the input may not end where the
    body does: it is left to Django, which reads nothing without a length."""
    status, body = _call(_environ(_start_body(), flow.key, terminated=False))
    assert status == 400 and body["field"] == "name", body


def check_a_chunked_start(port: int, key: str) -> None:
    """On a real server: the definitions registered as clients usually send
    a body (with its length), then a start sent chunked is created with its input."""
    headers = {"x-api-key": key, "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for path, body in DEFINITIONS:
            conn.request("POST", f"/v1/ns/default/{path}", body=json.dumps(body), headers=headers)
            response = conn.getresponse()
            assert response.status == 201, response.read()
            response.read()
    finally:
        conn.close()
    status, answer = send_chunked(port, key, "/v1/ns/default/executions", {"name": FLOW, "input": {"sent": "chunked"}})
    assert status == 201 and answer["input"] == {"sent": "chunked"}, answer


def send_chunked(port: int, key: str, path: str, body: dict) -> tuple[int, dict]:
    """POST ``body`` to a real server on loopback, chunked, in 7-byte pieces."""
    data = json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=iter([data[i : i + 7] for i in range(0, len(data), 7)]),
            headers={"x-api-key": key, "Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()
