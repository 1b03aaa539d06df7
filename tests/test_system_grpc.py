"""GRPC against a real grpcio server on loopback with server reflection. Its
service is built at runtime from descriptors, so the client side can only
know the message types through reflection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection

from tests.engine_helpers import execution, register, start, task_at, tasks_at
from tests.procs.stack import free_port
from tests.system_helpers import run_system_tasks, system_task

pytestmark = pytest.mark.django_db

SERVICE = "nftest.Echo"
STRING, OPTIONAL = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL


def echo_pool() -> descriptor_pool.DescriptorPool:
    """nftest.Echo/Say(EchoRequest{text, fail_with}) → EchoReply{text, tenant}."""
    proto = descriptor_pb2.FileDescriptorProto(name="nftest/echo.proto", package="nftest", syntax="proto3")
    for message, fields in (("EchoRequest", ("text", "fail_with")), ("EchoReply", ("text", "tenant"))):
        added = proto.message_type.add(name=message)
        for number, field in enumerate(fields, start=1):
            added.field.add(name=field, number=number, type=STRING, label=OPTIONAL)
    proto.service.add(name="Echo").method.add(
        name="Say", input_type=".nftest.EchoRequest", output_type=".nftest.EchoReply"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return pool


class EchoServer:
    def __init__(self) -> None:
        pool = echo_pool()
        self.request_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("nftest.EchoRequest"))
        self.reply_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("nftest.EchoReply"))
        self.release = threading.Event()
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.unary_unary_rpc_method_handler(
            self.say,
            request_deserializer=self.request_cls.FromString,
            response_serializer=self.reply_cls.SerializeToString,
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Say": handler}),))
        reflection.enable_server_reflection([SERVICE, reflection.SERVICE_NAME], self.server, pool=pool)
        self.target = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    def say(self, request, context):
        self.calls += 1
        if request.fail_with == "HANG":
            self.release.wait(10)
        elif request.fail_with:
            context.abort(getattr(grpc.StatusCode, request.fail_with), f"asked to fail with {request.fail_with}")
        tenant = dict(context.invocation_metadata()).get("x-tenant", "")
        return self.reply_cls(text=request.text.upper(), tenant=tenant)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    server.server.start()
    yield server
    server.release.set()
    server.server.stop(grace=None)


def grpc_task(target: str, request: dict, **extra) -> dict:
    spec = {"host": target, "service": SERVICE, "method": "Say", "request": request, **extra}
    return system_task("rpc", "GRPC", grpc_request=spec)


def run_one(api, task: dict) -> dict:
    register(api, "flow", task)
    started = start(api, "flow")
    run_system_tasks()
    return execution(api, started["id"])


def test_it_calls_with_types_from_reflection(api, echo):
    view = run_one(api, grpc_task(echo.target, {"text": "hello"}, metadata={"X-Tenant": "acme"}, deadlineSeconds=5))
    assert view["status"] == "COMPLETED"
    assert task_at(view, "rpc")["outputData"] == {"response": {"text": "HELLO", "tenant": "acme"}}


def test_it_includes_fields_at_their_zero_value(api, echo):
    view = run_one(api, grpc_task(echo.target, {"text": "quiet"}))
    assert task_at(view, "rpc")["outputData"] == {"response": {"text": "QUIET", "tenant": ""}}


def test_it_fails_invalid_argument_terminally(api, echo):
    view = run_one(api, grpc_task(echo.target, {"text": "x", "failWith": "INVALID_ARGUMENT"}))
    task = task_at(view, "rpc")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert task["outputData"]["grpcStatus"] == "INVALID_ARGUMENT"
    assert "asked to fail" in task["reasonForIncompletion"]
    assert len(tasks_at(view, "rpc")) == 1 and view["status"] == "FAILED"


def test_it_retries_unavailable(api, echo):
    view = run_one(api, grpc_task(echo.target, {"failWith": "UNAVAILABLE"}))
    first, second = tasks_at(view, "rpc")
    assert first["status"] == "FAILED" and first["outputData"]["grpcStatus"] == "UNAVAILABLE"
    assert second["status"] == "SCHEDULED" and second["attempt"] == 2


def test_it_retries_an_exceeded_deadline(api, echo):
    view = run_one(api, grpc_task(echo.target, {"failWith": "HANG"}, deadlineSeconds=0.3))
    first = tasks_at(view, "rpc")[0]
    assert first["status"] == "FAILED" and first["outputData"]["grpcStatus"] == "DEADLINE_EXCEEDED"


def test_it_retries_when_nothing_listens(api):
    view = run_one(api, grpc_task(f"127.0.0.1:{free_port()}", {"text": "x"}, deadlineSeconds=2))
    first = tasks_at(view, "rpc")[0]
    assert first["status"] == "FAILED" and first["outputData"]["grpcStatus"] == "UNAVAILABLE"


def test_it_fails_an_unknown_method_terminally(api, echo):
    task = system_task("rpc", "GRPC", grpc_request={"host": echo.target, "service": SERVICE, "method": "Shout"})
    failed = task_at(run_one(api, task), "rpc")
    assert failed["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "has no method Shout" in failed["reasonForIncompletion"]


def test_it_fails_a_request_that_does_not_fit_terminally(api, echo):
    failed = task_at(run_one(api, grpc_task(echo.target, {"colour": "red"})), "rpc")
    assert failed["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "does not fit nftest.EchoRequest" in failed["reasonForIncompletion"]
    assert echo.calls == 0


def test_it_refuses_the_unspecified_address(api, echo):
    port = echo.target.rsplit(":", 1)[1]
    task = task_at(run_one(api, grpc_task(f"0.0.0.0:{port}", {"text": "x"})), "rpc")
    assert task["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert "unspecified address" in task["reasonForIncompletion"]
