"""This machine's addresses other than loopback, for tests of what may be sent where."""

from __future__ import annotations

import socket


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (the one its default route
    uses; no packet is sent), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.254", 9))  # TEST-NET-1: only picks the route
        except OSError:
            return None
        address = sock.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address
