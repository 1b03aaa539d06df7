"""GRPC: one unary call; output ``{"response": <the reply as JSON>}``.

``grpc_request``: ``host`` ("host:port"), ``service`` (full name,
"pkg.Service"), ``method``, ``request`` (JSON for the request message),
``metadata`` (an object of strings), ``deadlineSeconds`` (default 30), ``tls``
(default false). Message types come from the server's reflection service,
so nothing is compiled in; JSON ↔ protobuf goes through
``google.protobuf.json_format`` (the reply uses proto3 JSON names, lowerCamelCase,
and includes fields left at their zero value).

Terminal: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED (SPEC §5),
and a request that does not fit the message, a service or method the server
does not know. Everything else is retryable. Breakers (keyed by ``service``)
count UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN
and DATA_LOSS: the gRPC faces of connection errors, timeouts, 429 and 5xx.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from executions.system_tasks import outbound
from executions.system_tasks.base import (
    Context,
    Outcome,
    RetryableError,
    SystemTask,
    TaskFailure,
    TerminalError,
    completed,
    optional,
    require,
    seconds,
)
from executions.system_tasks.registry import register

S = grpc.StatusCode
TERMINAL = frozenset(
    {
        S.INVALID_ARGUMENT,
        S.NOT_FOUND,
        S.ALREADY_EXISTS,
        S.PERMISSION_DENIED,
        S.UNAUTHENTICATED,
        S.FAILED_PRECONDITION,
        S.OUT_OF_RANGE,
        S.UNIMPLEMENTED,
    }
)
COUNTED = frozenset({S.UNAVAILABLE, S.DEADLINE_EXCEEDED, S.RESOURCE_EXHAUSTED, S.INTERNAL, S.UNKNOWN, S.DATA_LOSS})
DEFAULT_DEADLINE_S = 30.0
WHERE = "grpc_request"


def classify(error: grpc.RpcError, what: str) -> TaskFailure:
    code = error.code() if callable(getattr(error, "code", None)) else S.UNKNOWN
    output = {"grpcStatus": code.name, "details": error.details() if callable(getattr(error, "details", None)) else ""}
    reason = f"gRPC {code.name} from {what}: {output['details']}"
    failure = TerminalError if code in TERMINAL else RetryableError
    return failure(reason, output=output, counts=code in COUNTED)


class _Reflection(ProtoReflectionDescriptorDatabase):
    """Server reflection with a deadline on every request (the stock client
    waits forever on a server that accepts the connection and never answers)."""

    def __init__(self, channel: grpc.Channel, timeout_s: float) -> None:
        super().__init__(channel)
        stream = self._stub.ServerReflectionInfo
        self._stub.ServerReflectionInfo = lambda requests: stream(requests, timeout=timeout_s)


def split_target(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise TerminalError(f"{WHERE}.host must be host:port, not {target!r}")
    return host.strip("[]"), int(port)


def message_types(channel: grpc.Channel, service: str, method: str, timeout_s: float):
    pool = descriptor_pool.DescriptorPool(_Reflection(channel, timeout_s))
    try:
        descriptor = pool.FindServiceByName(service).FindMethodByName(method)
    except KeyError as exc:
        raise TerminalError(
            f"gRPC service {service} has no method {method} (per server reflection)", counts=False
        ) from exc
    if descriptor is None:
        raise TerminalError(f"gRPC service {service} has no method {method} (per server reflection)", counts=False)
    if descriptor.client_streaming or descriptor.server_streaming:
        raise TerminalError(f"{service}/{method} is a streaming method; GRPC makes unary calls only", counts=False)
    return message_factory.GetMessageClass(descriptor.input_type), message_factory.GetMessageClass(
        descriptor.output_type
    )


def parse_message(cls: Any, body: Any) -> Any:
    try:
        return json_format.ParseDict(body, cls())
    except (json_format.ParseError, TypeError, AttributeError) as exc:
        raise TerminalError(f"{WHERE}.request does not fit {cls.DESCRIPTOR.full_name}: {exc}") from exc


def open_channel(target: str, tls: bool, *, address: str | None = None) -> grpc.Channel:
    """A channel to ``target``; with ``address`` (``ip:port``, the one the
    outbound check resolved), connected there, the authority and the TLS
    name still ``target``'s host: grpc never resolves the name again."""
    if address is None:
        return grpc.secure_channel(target, grpc.ssl_channel_credentials()) if tls else grpc.insecure_channel(target)
    options = [("grpc.default_authority", target)]
    if tls:
        options.append(("grpc.ssl_target_name_override", split_target(target)[0]))
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(), options=options)
    return grpc.insecure_channel(address, options=options)


@register
class Grpc(SystemTask):
    type = "GRPC"

    def execute(self, ctx: Context) -> Outcome:
        spec = require(ctx.input, WHERE, dict, "inputParameters")
        target = require(spec, "host", str, WHERE)
        service, method = require(spec, "service", str, WHERE), require(spec, "method", str, WHERE)
        metadata = [(str(k).lower(), str(v)) for k, v in optional(spec, "metadata", dict, WHERE, {}).items()]
        deadline = min(seconds(spec, "deadlineSeconds", WHERE, DEFAULT_DEADLINE_S), ctx.time_left())
        host, port = split_target(target)
        address = outbound.pinned(outbound.check(host, port), port)
        what = f"{service}/{method} at {target}"
        with open_channel(target, bool(spec.get("tls")), address=address) as channel:
            try:
                request_cls, reply_cls = message_types(channel, service, method, deadline)
                request = parse_message(request_cls, optional(spec, "request", dict, WHERE, {}))
                stub = channel.unary_unary(
                    f"/{service}/{method}",
                    request_serializer=request_cls.SerializeToString,
                    response_deserializer=reply_cls.FromString,
                )
                reply = stub(request, timeout=min(deadline, ctx.time_left()), metadata=metadata)
            except grpc.RpcError as exc:
                raise classify(exc, what) from exc
        # Zero values included: an expression reading a field finds 0 or "", not nothing.
        return completed({"response": json_format.MessageToDict(reply, always_print_fields_with_no_presence=True)})

    def breaker_key(self, ctx: Context) -> str:
        spec = require(ctx.input, WHERE, dict, "inputParameters")
        return require(spec, "service", str, WHERE)
