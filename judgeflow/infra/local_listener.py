"""Who answers a connection to a loopback TCP port, from Linux's ``/proc``: the
listening sockets that would take it (``/proc/net/tcp`` and ``tcp6``: the address
itself, or a wildcard), each with its owner's uid and its inode, and whether a
given process's session holds those inodes among its file descriptors.

A live pid proves nothing: pids are reused, and another user's pid counts as
alive. A listening socket's uid is the kernel's word, and no other unprivileged
user can make a socket with ours nor join our port (``SO_REUSEPORT`` asks for the
same uid); the inode held by the recorded process's session ties the socket to
the process judgeflow started rather than to any other of the user's programs."""

from __future__ import annotations

import os
import pwd
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"
# the addresses whose listener takes a connection to 127.0.0.1, as /proc/net writes them
_WILDCARD_V4 = "00000000"
_WILDCARD_V6 = "0" * 32
_MAPPED_V6_PREFIX = "0000000000000000FFFF0000"


@dataclass(frozen=True)
class Listener:
    uid: int
    inode: int


def _v4_hex(host: str) -> str:
    # /proc/net/tcp writes an IPv4 address as one 32-bit word in the host's byte order
    return "%08X" % struct.unpack("=I", socket.inet_aton(host))[0]


def listeners(host: str, port: int, proc: Path = PROC) -> list[Listener] | None:
    """The sockets listening where a connection to ``host:port`` (IPv4) may go; None
    when this system has no ``/proc/net/tcp`` to tell."""
    v4 = _v4_hex(host)
    addresses = {f"{v4}:{port:04X}", f"{_WILDCARD_V4}:{port:04X}", f"{_WILDCARD_V6}:{port:04X}",
                 f"{_MAPPED_V6_PREFIX}{v4}:{port:04X}"}
    found: list[Listener] = []
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1] in addresses and fields[3] == LISTEN:
                found.append(Listener(uid=int(fields[7]), inode=int(fields[9])))
    return found if readable else None


def session_of(pid: int, proc: Path = PROC) -> list[int]:
    """The processes of the session ``pid`` leads (a process started with
    ``start_new_session`` and its children)."""
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == pid:
            members.append(int(entry.name))
    return members


def held_inodes(pids: list[int], proc: Path = PROC) -> set[int]:
    """The socket inodes among the file descriptors of ``pids`` (those this user may read)."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:["):-1]))
    return inodes


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def why_not_served_by(pid: int, host: str, port: int, proc: Path = PROC) -> str | None:
    """None when every socket that would take a connection to ``host:port`` is this
    user's and held by the session of ``pid``; else why not, in words."""
    found = listeners(host, port, proc)
    if found is None:
        return "this system has no /proc/net/tcp to tell who listens there"
    if not found:
        return "nothing listens there"
    me = os.geteuid()
    foreign = [s for s in found if s.uid != me]
    if foreign:
        return f"its socket belongs to {_user(foreign[0].uid)}, not to you ({_user(me)})"
    held = held_inodes(session_of(pid, proc), proc)
    if any(s.inode not in held for s in found):
        return f"its socket is not held by the server judgeflow started (pid {pid})"
    return None
