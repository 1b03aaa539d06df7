"""The worker SDK's HTTP transport (``nodeflow_worker.transport``): httpx's
client on kept-alive ``http.client`` connections. Against real sockets on
loopback: connections are reused; one the server closed while idle is
replaced without an error; a request goes out in one write; failures are
httpx's errors, so the SDK's retry rules see them as before; https works."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from nodeflow_worker.backoff import is_transient
from nodeflow_worker.transport import KeptAliveTransport
from tests.worker_helpers import loopback_server


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as granian, gunicorn and waitress answer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.ports.append(self.client_address[1])  # type: ignore[attr-defined]  # set below
        answer = json.dumps({"path": self.path, "got": json.loads(body or b"null")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def echo():
    with loopback_server(_Echo, ports=[]) as server:  # ports: the client port of each request
        yield server


def _client(url: str, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=url, transport=KeptAliveTransport(**kwargs), timeout=5)


def _raw_server(handle: Callable[[socket.socket, int], None]) -> str:
    """A loopback server that hands each accepted connection (and its
    number, from 0) to ``handle``, which closes it; serves 3 at most."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            for number in range(3):
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                handle(connection, number)

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(body) < length:
        body += connection.recv(65536)
    return data


OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def test_it_keeps_one_connection_alive_for_requests_one_after_another(echo):
    url = f"http://127.0.0.1:{echo.server_port}"
    with _client(url) as client:
        answers = [client.post("/x", json={"n": n}).json() for n in range(5)]
        assert client.get("/y?a=1").json()["path"] == "/y?a=1"
    assert [answer["got"] for answer in answers] == [{"n": n} for n in range(5)]
    assert len(set(echo.ports)) == 1


def test_threads_share_a_transport_each_on_a_connection_of_its_own(echo):
    url = f"http://127.0.0.1:{echo.server_port}"
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    with _client(url) as client:

        def work(n: int) -> None:
            try:
                barrier.wait(5)
                for i in range(20):
                    assert client.post("/x", json={"n": n, "i": i}).json()["got"] == {"n": n, "i": i}
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert not errors
    assert len(echo.ports) == 80
    assert len(set(echo.ports)) <= 4  # reused, never more connections than threads


def test_it_sends_a_request_in_one_write(monkeypatch):
    """Head and body together: a body sent in a second write waits for the
    ACK of the first (Nagle), which the server delays."""
    requests: list[bytes] = []

    def handle(connection: socket.socket, _: int) -> None:
        with connection:
            requests.append(_read_request(connection))
            connection.sendall(OK)

    url = _raw_server(handle)
    writes: list[bytes] = []
    sendall = socket.socket.sendall

    def counted(sock: socket.socket, data, *args) -> None:
        writes.append(bytes(data))
        sendall(sock, data, *args)

    with _client(url) as client:
        monkeypatch.setattr(socket.socket, "sendall", counted)
        assert client.post("/x", json={"body": "x" * 1000}).status_code == 200
    sent = [data for data in writes if not data.startswith(b"HTTP/")]  # the server's answer is counted too
    assert sent == requests  # one write, the whole request
    assert sent[0].endswith(json.dumps({"body": "x" * 1000}, separators=(",", ":")).encode())


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error():
    closed = threading.Event()

    def handle(connection: socket.socket, number: int) -> None:
        with connection:
            _read_request(connection)
            connection.sendall(OK)  # keep-alive, then closed as an idle timeout would
        closed.set()

    url = _raw_server(handle)
    with _client(url) as client:
        assert client.post("/x", json={}).status_code == 200
        assert closed.wait(5)
        assert client.post("/x", json={}).status_code == 200  # on a new connection


def test_a_refused_connection_is_a_transient_connect_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it once closed
    with _client(f"http://127.0.0.1:{port}") as client, pytest.raises(httpx.ConnectError) as refused:
        client.get("/")
    assert is_transient(refused.value)


@pytest.mark.parametrize(
    "answer, error",
    [
        (b"", httpx.RemoteProtocolError),  # closed without an answer
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}", httpx.RemoteProtocolError),  # closed mid-body
        (b"garbage\r\n\r\n", httpx.ReadError),  # not HTTP
    ],
)
def test_a_broken_answer_is_a_transient_transport_error(answer, error):
    def handle(connection: socket.socket, _: int) -> None:
        with connection:
            _read_request(connection)
            connection.sendall(answer)

    url = _raw_server(handle)
    with _client(url) as client, pytest.raises(error) as broken:
        client.post("/x", json={})
    assert is_transient(broken.value)


def test_a_silent_server_is_a_read_timeout():
    done = threading.Event()

    def handle(connection: socket.socket, _: int) -> None:
        with connection:
            _read_request(connection)
            done.wait(5)  # never answers

    url = _raw_server(handle)
    client = httpx.Client(base_url=url, transport=KeptAliveTransport(), timeout=0.05)
    try:
        with pytest.raises(httpx.ReadTimeout) as late:
            client.post("/x", json={})
        assert is_transient(late.value)
    finally:
        done.set()
        client.close()


@pytest.fixture
def tls_echo(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with loopback_server(_Echo, tls=context, ports=[]) as server:
        yield f"https://127.0.0.1:{server.server_port}", cert


def test_it_speaks_https_and_checks_the_certificate(tls_echo):
    url, cert = tls_echo
    trusting = ssl.create_default_context(cafile=str(cert))
    with _client(url, verify=trusting) as client:
        assert client.post("/x", json={"n": 1}).json()["got"] == {"n": 1}
        assert client.post("/x", json={"n": 2}).json()["got"] == {"n": 2}
    with _client(url) as client, pytest.raises(httpx.ConnectError):
        client.post("/x", json={})  # a certificate no authority signed
