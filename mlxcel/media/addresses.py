"""Which IP addresses a remote media URL may reach: public unicast only. Loopback,
private, link-local, CGNAT, multicast, unspecified, reserved and documentation ranges
are refused, in IPv4 and IPv6, and so are IPv6 forms that embed an IPv4 address
(IPv4-mapped, 6to4, NAT64) when the embedded address is refused."""

from __future__ import annotations

import ipaddress

_V4_BLOCKED = [ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8",  # "this network", unspecified
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local (cloud metadata endpoints live here)
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # documentation
    "192.88.99.0/24",  # 6to4 relay anycast
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation
    "203.0.113.0/24",  # documentation
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, broadcast
)]

_V6_BLOCKED = [ipaddress.IPv6Network(n) for n in (
    "::/96",  # unspecified, loopback, IPv4-compatible (deprecated)
    "64:ff9b:1::/48",  # local-use NAT64
    "100::/64",  # discard
    "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, ...)
    "2001:db8::/32",  # documentation
    "fc00::/7",  # unique local
    "fe80::/10",  # link-local
    "fec0::/10",  # site-local (deprecated)
    "ff00::/8",  # multicast
)]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host or socket name spells (a zone suffix dropped), or None."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None


def embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and routes to, if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address | str) -> bool:
    """True for a public unicast address a media fetch may connect to."""
    if isinstance(address, str):
        parsed = parse_address(address)
        if parsed is None:
            return False
        address = parsed
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_v4(address)
        if inner is not None:
            return is_public(inner)
        return address.is_global and not any(address in net for net in _V6_BLOCKED)
    return address.is_global and not any(address in net for net in _V4_BLOCKED)
