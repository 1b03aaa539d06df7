"""The worker SDK's client keeps its long polls on a connection of their own
(``Client.polls``): a poller goes on polling the server process it polled
before, whatever results and heartbeats do meanwhile. On PostgreSQL every
server process that holds a parked poll listens for wake-ups, and every
notice costs each listener a transaction, so one poller must not spread its
parks over every process of a server (granian, gunicorn). A real HTTP server on loopback
records which client connection (its port) carried each request."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from nodeflow_worker import Client
from tests.worker_helpers import leased_task, loopback_server


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as granian, gunicorn and waitress answer

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if not self.path.startswith(("/v1/ns/default/tasks/poll/",)):
            time.sleep(0.002)  # results take a little while: their connections come and go
        self.server.seen.append((self.path, self.client_address[1]))  # type: ignore[attr-defined]  # set below
        answer = b"[]" if "/tasks/poll/" in self.path else json.dumps({"taskId": "t", "status": "COMPLETED"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    with loopback_server(_Recorder, seen=[]) as server:  # seen: (path, client port) of each request
        yield server


def test_it_polls_on_one_connection_while_results_use_others(recorder):
    client = Client(f"http://127.0.0.1:{recorder.server_address[1]}", "nf_key")
    stop = threading.Event()

    def report() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            client.result(leased_task(f"t{n}"), "COMPLETED")
            time.sleep(0.001)  # as a worker's reporter: results now and then

    reporters = [threading.Thread(target=report) for _ in range(2)]
    for thread in reporters:
        thread.start()
    while len(recorder.seen) < 4:  # the results' connections are open first
        time.sleep(0.001)
    try:
        for _ in range(40):
            client.poll("q", worker_id="w", count=1, wait_s=0)
            time.sleep(0.003)  # meanwhile results finish, and their connections go back idle
    finally:
        stop.set()
        for thread in reporters:
            thread.join()
        client.close()
    polls = {port for path, port in recorder.seen if "/tasks/poll/" in path}
    results = {port for path, port in recorder.seen if path.endswith("/result")}
    assert len(polls) == 1
    assert not polls & results
