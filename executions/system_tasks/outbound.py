"""Which hosts a system task may call: NODE_FLOW_OUTBOUND_DENY,
NODE_FLOW_OUTBOUND_ALLOW_PRIVATE and NODE_FLOW_OUTBOUND_ALLOW.

Each entry is a CIDR (``169.254.0.0/16``), an address, or a host name
(``metadata.google.internal``; a leading dot, ``.internal``, also matches
every subdomain). The host name is normalised once (IDNA 2008, as the HTTP
client encodes it), resolved, and every address it resolves to is checked,
so a name that points at a denied address is refused too. In order:

1. the deny-list refuses (deny wins over everything);
2. an unspecified address (``0.0.0.0``, ``::``, what ``0`` resolves to),
   which reaches the local host, is always refused;
3. an address that is not globally routable (loopback, private, link-local,
   shared, reserved) is refused unless NODE_FLOW_OUTBOUND_ALLOW_PRIVATE
   lets its network or the host name through: the safe default;
4. a non-empty allow-list must allow the host name, or every address.

Refusals are terminal: the same input is refused again. The caller then
connects to an address this check returned (``check`` → ``pinned``), never
resolving the name again, so a DNS answer that changes in between
(rebinding) cannot steer the connection elsewhere.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import idna
from django.conf import settings

from executions.system_tasks.base import RetryableError, TerminalError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Rules:
    networks: tuple[Network, ...]
    names: tuple[str, ...]

    def matches_name(self, host: str) -> bool:
        return any(host == name or (name.startswith(".") and host.endswith(name)) for name in self.names)

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
    name = normalise(host)
    deny, allow = parse_rules(settings.NODE_FLOW_OUTBOUND_DENY), parse_rules(settings.NODE_FLOW_OUTBOUND_ALLOW)
    private = parse_rules(settings.NODE_FLOW_OUTBOUND_ALLOW_PRIVATE)
    if deny.matches_name(name):
        raise _refused(host, "the host is in NODE_FLOW_OUTBOUND_DENY")
    addresses = resolve(name, port)
    for address in (alias for resolved in addresses for alias in aliases(resolved)):
        network = deny.matching_network(address)
        if network is not None:
            raise _refused(host, f"it resolves to {address}, inside {network} (NODE_FLOW_OUTBOUND_DENY)")
        if address.is_unspecified:
            raise _refused(host, f"it resolves to {address}, the unspecified address, which reaches this host")
        if not address.is_global and not private.matches_name(name) and private.matching_network(address) is None:
            raise _refused(
                host,
                f"it resolves to {address}, which is not a public address "
                "(allow it with NODE_FLOW_OUTBOUND_ALLOW_PRIVATE)",
            )
    if (allow.networks or allow.names) and not allow.matches_name(name):
        outside = [a for a in addresses if allow.matching_network(a) is None]
        if outside:
            raise _refused(host, f"{outside[0]} is not in NODE_FLOW_OUTBOUND_ALLOW")
    return addresses


def normalise(host: str) -> str:
    """The host as it is checked and connected to: lower case, no trailing
    dot or brackets, a name in IDNA 2008 (``straße.de`` is
    ``xn--strae-oqa.de``, as the HTTP client sends it, never IDNA 2003's
    ``strasse.de``)."""
    name = host.lower().rstrip(".").strip("[]")
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    try:
        return idna.encode(name, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise _refused(host, f"the host name is not a valid IDNA 2008 name: {exc}") from exc


def pinned(addresses: list[Address], port: int) -> str:
    """``address:port`` a call connects to: the first address the check
    resolved (IPv6 in brackets)."""
    address = addresses[0]
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RetryableError(f"connection error: cannot resolve {host}: {exc}", counts=True) from exc
    # An IPv6 answer carries no address text on a Python built without IPv6.
    texts = [info[4][0] for info in infos if isinstance(info[4][0], str)]
    return list(dict.fromkeys(_unmapped(ipaddress.ip_address(text.split("%")[0])) for text in texts))


def aliases(address: Address) -> list[Address]:
    """``address`` and the IPv4 addresses an IPv6 one carries (6to4, Teredo,
    NAT64 ``64:ff9b::/96``): every one is held to the rules, so a denied
    range cannot be reached through a translation of it."""
    found: list[Address] = [address]
    if address.version == 6:
        embedded = [address.sixtofour, *(address.teredo or ())]
        if address in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        found += [a for a in embedded if a is not None]
    return found


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _unmapped(address: Address) -> Address:
    """``::ffff:169.254.169.254`` is 169.254.169.254."""
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _refused(host: str, why: str) -> TerminalError:
    return TerminalError(f"outbound request to {host} refused: {why}", output={"refused": host})
