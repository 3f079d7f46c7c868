"""Who listens on a loopback port (judgeflow/infra/local_listener.py): the kernel's
tables for the owner, the session's file descriptors for the process. The other
user's case is tests/infra/test_prefect_server.py's impostor."""

from __future__ import annotations

import os
import subprocess
import sys

from judgeflow.infra.local_listener import listeners, why_not_served_by

BIND = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
        "print(s.getsockname()[1], flush=True); sys.stdin.read()")


def test_a_server_in_its_own_session_is_proven_and_another_process_is_not():
    child = subprocess.Popen([sys.executable, "-c", BIND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        port = int(child.stdout.readline())
        [socket_] = listeners("127.0.0.1", port)
        assert socket_.uid == os.geteuid()
        assert why_not_served_by(child.pid, "127.0.0.1", port) is None
        # the same socket, asked of a pid whose session does not hold it (this test's own)
        assert why_not_served_by(os.getpid(), "127.0.0.1", port) == (
            f"its socket is not held by the server judgeflow started (pid {os.getpid()})")
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert why_not_served_by(child.pid, "127.0.0.1", port) == "nothing listens there"


def test_a_wildcard_listener_of_another_uid_counts_and_no_proc_table_proves_nothing(tmp_path):
    # as /proc/net/tcp6 writes a socket listening on [::]:4200 (port 0x1068) of uid 1001
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp6").write_text(
        "  sl  local_address                         remote_address                        st tx_queue rx_queue tr "
        "tm->when retrnsmt   uid  timeout inode\n"
        "   0: 00000000000000000000000000000000:1068 00000000000000000000000000000000:0000 0A 00000000:00000000 "
        "00:00000000 00000000  1001        0 424242 1 0000000000000000 100 0 0 10 0\n")
    assert listeners("127.0.0.1", 4200, tmp_path)[0].uid == 1001
    if os.geteuid() != 1001:
        assert why_not_served_by(1, "127.0.0.1", 4200, tmp_path).startswith("its socket belongs to uid 1001")
    assert why_not_served_by(1, "127.0.0.1", 4201, tmp_path) == "nothing listens there"
    assert why_not_served_by(1, "127.0.0.1", 4200, tmp_path / "none") == (
        "this system has no /proc/net/tcp to tell who listens there")
