"""Which hosts a system task may call: NODE_FLOW_OUTBOUND_DENY and
NODE_FLOW_OUTBOUND_ALLOW.

Each entry is a CIDR (``169.254.0.0/16``), an address, or a host name
(``metadata.google.internal``; a leading dot, ``.internal``, also matches
every subdomain). The host is resolved first and every address it resolves
to is checked, so a name that points at a denied address is refused too.
Deny wins. An empty allow-list allows whatever the deny-list does not refuse;
otherwise the host name, or every address, must be allowed. Refusals are
terminal: the same input is refused again.

Known limit: the HTTP client resolves the name again when it connects, so a
DNS answer that changes in between (rebinding) is not caught here.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from django.conf import settings

from executions.system_tasks.base import RetryableError, TerminalError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Rules:
    networks: tuple[Network, ...]
    names: tuple[str, ...]

    def matches_name(self, host: str) -> bool:
        return any(host == name or name.startswith(".") and host.endswith(name) for name in self.names)

    def matching_network(self, address: Address) -> Network | None:
        return next((net for net in self.networks if address.version == net.version and address in net), None)


def parse_rules(entries: list[str]) -> Rules:
    networks, names = [], []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            names.append(entry.lower().rstrip("."))
    return Rules(tuple(networks), tuple(names))


def check(host: str, port: int) -> list[Address]:
    """Resolve ``host`` and check it against the outbound rules; the
    addresses it resolved to. TerminalError when refused, RetryableError when
    the name does not resolve."""
    name = host.lower().rstrip(".").strip("[]")
    deny, allow = parse_rules(settings.NODE_FLOW_OUTBOUND_DENY), parse_rules(settings.NODE_FLOW_OUTBOUND_ALLOW)
    if deny.matches_name(name):
        raise _refused(host, "the host is in NODE_FLOW_OUTBOUND_DENY")
    addresses = resolve(name, port)
    for address in addresses:
        network = deny.matching_network(address)
        if network is not None:
            raise _refused(host, f"it resolves to {address}, inside {network} (NODE_FLOW_OUTBOUND_DENY)")
    if (allow.networks or allow.names) and not allow.matches_name(name):
        outside = [a for a in addresses if allow.matching_network(a) is None]
        if outside:
            raise _refused(host, f"{outside[0]} is not in NODE_FLOW_OUTBOUND_ALLOW")
    return addresses


def resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RetryableError(f"connection error: cannot resolve {host}: {exc}", counts=True) from exc
    return list(dict.fromkeys(_unmapped(ipaddress.ip_address(info[4][0].split("%")[0])) for info in infos))


def _unmapped(address: Address) -> Address:
    """``::ffff:169.254.169.254`` is 169.254.169.254."""
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _refused(host: str, why: str) -> TerminalError:
    return TerminalError(f"outbound request to {host} refused: {why}", output={"refused": host})
