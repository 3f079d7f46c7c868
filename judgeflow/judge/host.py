"""The judge host: litellm imported once per machine and home, not once per run.

Importing litellm costs ~3 s of CPU, paid by every run before its first judge
call (measured: the first call of a 400-trace run waited until ~4 s after the
process started, a third of the run). The judge host is a process under
``JUDGEFLOW_HOME/judge-host`` that has imported litellm and forks a judge
worker (:mod:`judgeflow.judge.worker`) for each worker a run's
:class:`~judgeflow.judge.process_pool.JudgeProcessPool` asks for; a fork
takes milliseconds. It lives like the local Prefect server: the first run that
needs it starts it, later runs reuse it, ``judgeflow stop`` stops it, and it
exits by itself after ``JUDGEFLOW_JUDGE_HOST_IDLE`` (default 25 h, so a nightly
schedule finds it warm) without a worker. ``JUDGEFLOW_JUDGE_HOST=false``
goes back to starting the workers per run.

What a forked worker runs with:

* **the run's environment**, not the host's: the run sends its ``os.environ``
  and the worker replaces its own with it before it builds a client (proxies,
  CA bundles, provider keys are read then), then applies the litellm adapter's
  environment defaults again where the run's does not set them (litellm's HTTP
  handler switch is read on every call); its settings (model, key, base
  URL, concurrency share) come over its request pipe as before;
* **the run's working directory and import path** (a request names its
  response format by module);
* **the run's stderr**: the run passes its stderr descriptor, so litellm's
  log lines land in the run's log as with a worker the run started;
* **the same code**: the host records a fingerprint of the interpreter,
  judgeflow's source files (path, size, mtime), litellm's version and the
  ``LITELLM_*`` environment litellm reads at import; a run whose fingerprint
  differs stops that host (its workers finish serving their runs) and starts
  a new one.

The wire: a run connects to the host's Unix socket (in a 0700 directory) and
sends one message, ``len + pickle({"env", "cwd", "path", "pairs"})`` with the
descriptors of its pipes attached (``SCM_RIGHTS``: request read end, reply
write end per worker, then its stderr). To a host still importing litellm
(just started) it does not wait for an answer: the host accepts later, and
the worker's hello frame on its reply pipe is the answer. A ready host
answers one byte once it has forked; one that does not within
``ACK_TIMEOUT_S`` (stopped, hung) is killed and the run starts its workers
itself. A host that dies first closes the descriptors in
flight, which the pool sees as a worker that exited before answering (a
failed start, retried and counted as before).

CPU: forked workers are the host's children, so their CPU time is counted in
the host's (reaped children), not the run's; ``bench/`` adds it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from judgeflow.dir_lock import locked
from judgeflow.errors import JudgeHostError
from judgeflow.judge.litellm_env import ENVIRONMENT_DEFAULTS, apply_environment_defaults
from judgeflow.local_process import pid_alive, reap_exited, runs_in, terminate

SOCKET_NAME = "host.sock"
STATE_NAME = "host.json"
LOG_NAME = "host.log"
# the host binds its socket before importing litellm; on a busy 2-core machine
# a Python process has taken seconds to get that far
START_TIMEOUT_S = 60.0
# a ready host forks and answers within milliseconds; this allows for a busy machine
ACK_TIMEOUT_S = 15.0
_ACK = b"+"
_LENGTH = struct.Struct(">I")
_MAX_FDS = 2 * 32 + 1  # JUDGEFLOW_JUDGE_PROCESSES <= 32 pairs, plus stderr
# environment names that may hold secrets: not copied into the host's own
# environment (each worker gets its run's whole environment over the socket)
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "DATABASE_URL", "API_BASE")


def host_dir(home: Path) -> Path:
    return (Path(home) / "judge-host").resolve()


# --------------------------------------------------------------------------
# the run's side
# --------------------------------------------------------------------------


def fingerprint() -> str:
    """What a forked worker or run would run: the interpreter, judgeflow's code
    on disk (flows, tasks and metrics included), the installed distributions
    (names carry versions) and the environment litellm reads at import."""
    from importlib.util import find_spec

    import judgeflow

    digest = hashlib.sha256(sys.executable.encode())
    roots = [Path(judgeflow.__file__).parent]
    for name in ("judgeflow.metrics", "judgeflow.tasks", "judgeflow.flows"):  # their own directories
        spec = find_spec(name)  # without importing them (flows import Prefect)
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for entry in sys.path:
        if entry.endswith("-packages") and os.path.isdir(entry):
            digest.update("\n".join(sorted(n for n in os.listdir(entry) if n.endswith(".dist-info"))).encode())
    environ = {**ENVIRONMENT_DEFAULTS, **os.environ}  # as a process that imported the adapter sees it
    for key in sorted(k for k in environ if k.startswith(("LITELLM_", "EXPERIMENTAL_OPENAI_"))):
        digest.update(f"{key}={environ[key]}\n".encode())
    return digest.hexdigest()[:24]


def state(home: Path) -> dict | None:
    """The running host's record (pid, fingerprint, started_at), or None."""
    directory = host_dir(home)
    try:
        record = json.loads((directory / STATE_NAME).read_text())
    except (OSError, ValueError):
        return None
    pid = int(record.get("pid", 0))
    if pid <= 0 or not pid_alive(pid) or not runs_in(pid, directory):
        return None
    return record


def fork_workers(home: Path, pipes: list[tuple[int, int]], *, idle_s: float) -> None:
    """Have the host under ``home`` (started or replaced if needed) fork one
    worker per ``(request read fd, reply write fd)``. Returns once asked; the
    caller still owns (and should close) its copies of the descriptors."""
    directory = host_dir(home)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    wanted = fingerprint()
    payload = pickle.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path), "pairs": len(pipes)})
    fds = [fd for pair in pipes for fd in pair] + [2]  # the run's stderr, for the workers' log lines
    with locked(directory):
        current = state(home)
        if current is not None and current.get("fingerprint") != wanted:
            _terminate(int(current["pid"]))  # its workers finish serving their runs
            current = None
        sock = _connect(directory) if current is not None else None
        if sock is None:
            starting = _spawn(directory, wanted, idle_s)
            sock = _connect(directory, wait_s=START_TIMEOUT_S, starting=starting)
            if sock is None:
                exited = starting is not None and starting.poll() is not None
                how = "exited" if exited else f"did not listen within {START_TIMEOUT_S:g} s"
                raise JudgeHostError(f"the judge host {how}; its log is {directory / LOG_NAME}")
            current = None
        with sock:
            socket.send_fds(sock, [_LENGTH.pack(len(payload)) + payload], fds)
            if current is not None and current.get("ready"):
                # A ready host forks at once; one that does not answer (stopped, hung) would
                # leave the run waiting for workers that never come: replaced instead.
                sock.settimeout(ACK_TIMEOUT_S)
                try:
                    acked = sock.recv(1) == _ACK
                except OSError:
                    acked = False
                if not acked:
                    _terminate(int(current["pid"]), timeout_s=2.0)
                    raise JudgeHostError(f"the judge host (pid {current['pid']}) did not answer within "
                                         f"{ACK_TIMEOUT_S:g} s; it was stopped")


def stop(home: Path, timeout_s: float = 10.0) -> bool:
    """Stop the host under ``home``; returns whether one was running. Workers it
    forked keep serving their runs until those close them."""
    directory = host_dir(home)
    if not directory.exists():
        return False
    with locked(directory):
        current = state(home)
        if current is None:
            return False
        _terminate(int(current["pid"]), timeout_s)
        return True


def run_command(home: Path, argv: list[str]) -> int | None:
    """Run ``judgeflow ARGV`` in a process the host under ``home`` forks (Prefect,
    litellm and judgeflow already imported) with this process's environment,
    working directory, umask and standard streams; returns its exit code. None
    when no host here can take it (none, not ready for runs, other code, no
    answer): the caller runs the command itself, nothing was started.

    While the command runs, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this
    process are passed on to it; if this process dies, the run gets SIGTERM."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:  # a closed standard stream (cron's <&-): nothing to hand over, and the
            return None  # socket below would take its number
    directory = host_dir(home)
    current = state(home)
    if current is None or not current.get("runs") or current.get("fingerprint") != fingerprint():
        return None
    sock = _connect(directory)
    if sock is None:
        return None
    payload = pickle.dumps({"kind": "run", "argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd(),
                            "path": list(sys.path), "umask": _umask()})
    with sock:
        try:
            socket.send_fds(sock, [_LENGTH.pack(len(payload)) + payload], [0, 1, 2])
        except OSError:  # the host went away meanwhile: nothing started
            return None
        sock.settimeout(ACK_TIMEOUT_S)
        try:
            pid = _recv_exactly(sock, _PID.size)
        except TimeoutError:
            # Nothing started: a forked run waits for the go below, and our close
            # ends it. A host that cannot fork within ACK_TIMEOUT_S (stopped, hung)
            # is replaced now, or the run's own request for workers would wait as long.
            print(f"judgeflow: the judge host (pid {current['pid']}) did not take the command within "
                  f"{ACK_TIMEOUT_S:g} s; it was stopped, and the command runs in this process", file=sys.stderr)
            with locked(directory):
                if (state(home) or {}).get("pid") == current["pid"]:
                    _terminate(int(current["pid"]), timeout_s=2.0)
            return None
        except OSError:
            pid = None
        if pid is None:  # the host closed the connection (refused, died): nothing started
            return None
        sock.settimeout(None)
        return _attend(sock, _PID.unpack(pid)[0])


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_GO = b"!"
_STATUS = struct.Struct(">ci")  # b"=", exit code
_PID = struct.Struct(">q")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _attend(sock: socket.socket, pid: int) -> int:
    """Start the forked run (pid) and wait for its exit code, passing signals on."""
    sent: list[int] = []

    def forward(signum, _frame):
        sent.append(signum)
        try:
            sock.send(bytes([signum]))
        except OSError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        sock.sendall(_GO)
        status = _recv_exactly(sock, _STATUS.size)  # a signal handled meanwhile does not interrupt it (PEP 475)
    except OSError:
        status = None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status is not None:
        return _STATUS.unpack(status)[1]
    if sent:  # it ended on the signal passed on, as a process of our own would have
        return 128 + sent[-1]
    print(f"judgeflow: the command's process (pid {pid}, forked by the judge host) ended without an exit "
          "status: it was killed", file=sys.stderr)
    return 1


def _connect(directory: Path, wait_s: float = 0.0, starting: subprocess.Popen | None = None) -> socket.socket | None:
    """A connection to the host's socket, waiting up to ``wait_s`` for it to
    appear (not longer than the ``starting`` host lives)."""
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _connect_to(sock, directory)
            return sock
        except OSError:
            sock.close()
        if time.monotonic() >= deadline or (starting is not None and starting.poll() is not None):
            return None
        time.sleep(0.02)


# A Unix socket's path has room for 107 bytes; a deep JUDGEFLOW_HOME is reached
# through this process's descriptor of the directory instead.
_MAX_SOCKET_PATH = 100


def _connect_to(sock: socket.socket, directory: Path) -> None:
    path = str(directory / SOCKET_NAME)
    if len(path.encode()) <= _MAX_SOCKET_PATH:
        sock.connect(path)
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
    finally:
        os.close(fd)


def _spawn(directory: Path, wanted: str, idle_s: float) -> subprocess.Popen:
    (directory / SOCKET_NAME).unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not any(word in k.upper() for word in _SECRET_WORDS)}
    with open(directory / LOG_NAME, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "judgeflow.judge.host", "--fingerprint", wanted, "--idle", str(idle_s)],
            cwd=directory, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            # its own session: it outlives this command and ignores the terminal's Ctrl-C
            start_new_session=True,
        )


def _terminate(pid: int, timeout_s: float = 10.0) -> None:
    # the host alone, not its session: the workers it forked are serving runs
    terminate(pid, timeout_s, kill_timeout_s=timeout_s)


# --------------------------------------------------------------------------
# the host process: python -m judgeflow.judge.host
# --------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds = b"", []
    while len(data) < _LENGTH.size or len(data) < _LENGTH.size + _LENGTH.unpack(data[:_LENGTH.size])[0]:
        chunk, more_fds, _, _ = socket.recv_fds(conn, 1 << 16, _MAX_FDS)
        fds += more_fds
        if not chunk:
            for fd in fds:
                os.close(fd)
            raise EOFError
        data += chunk
    try:
        message = pickle.loads(data[_LENGTH.size:])
        if not isinstance(message, dict):
            raise ValueError("not a request")
        # a run: its stdin, stdout and stderr; workers: a pipe pair each, then stderr
        expected = 3 if message.get("kind") == "run" else 2 * int(message["pairs"]) + 1
        if len(fds) != expected:
            raise ValueError("not a request")
    except Exception:
        # a descriptor kept here would hold a run's reply pipe open: it would wait forever
        for fd in fds:
            os.close(fd)
        raise ValueError("unreadable request") from None
    return message, fds


def _take_callers_context(message: dict) -> None:
    """In a forked child: the environment and import path of the process that
    sent ``message``, then its working directory (OSError if that is gone)."""
    os.environ.clear()
    os.environ.update(message["env"])
    sys.path[:] = message["path"]
    os.chdir(message["cwd"])


def _serve_forked(request_fd: int, reply_fd: int, stderr_fd: int, message: dict) -> None:
    """In a forked child: become a judge worker of the run that sent ``message``,
    with what a worker it started itself would have had: its environment,
    working directory, import path and stderr."""
    from judgeflow.judge import worker
    from judgeflow.judge.process_pool import read_frame

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _take_callers_context(message)
    except OSError:  # its working directory is gone: the worker needs none
        pass
    apply_environment_defaults()  # what the adapter sets at import, read by litellm per call
    os.dup2(stderr_fd, 2)
    os.dup2(stderr_fd, 1)  # stray prints go to the run's stderr, never into a pipe
    os.close(stderr_fd)
    requests, replies = os.fdopen(request_fd, "rb"), os.fdopen(reply_fd, "wb")
    try:
        settings = read_frame(requests)
    except EOFError:
        os._exit(0)
    worker.serve(settings, requests, replies)
    os._exit(0)


def _log(line: str) -> None:
    """A line in the host's log (its stdout and stderr are ``host.log``)."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} judge host {os.getpid()}: {line}", flush=True)


def _become_run(conn: socket.socket, listener: socket.socket, fds: list[int], message: dict) -> None:
    """In a forked child: become ``judgeflow ARGV`` as the process that sent
    ``message`` would have run it (see :func:`run_command`), and exit as
    Python exits (threads joined, exit handlers run), reporting the exit code
    last."""
    try:
        listener.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):  # its stdin, stdout and stderr
            os.dup2(fd, target)
            os.close(fd)
        _take_callers_context(message)
        os.umask(message["umask"])
        sys.argv = ["judgeflow", *message["argv"]]
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdout.reconfigure(line_buffering=unbuffered or os.isatty(1), write_through=unbuffered)
        sys.stderr.reconfigure(line_buffering=True, write_through=unbuffered)
        peer = socket.socket(fileno=os.dup(conn.fileno()))  # conn is closed as the host's frames unwind
        conn.close()
        peer.sendall(_PID.pack(os.getpid()))
        peer.settimeout(ACK_TIMEOUT_S)
        if _recv_exactly(peer, len(_GO)) != _GO:  # the caller gave up and runs the command itself
            os._exit(0)
        peer.settimeout(None)
    except BaseException:
        os._exit(1)

    import atexit
    import logging
    import threading
    import traceback

    outcome = {"code": 1, "reported": False}

    def report() -> None:  # registered after the host's imports' handlers: runs before them
        logging.shutdown()  # Prefect's API log handler sends what it holds
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        outcome["reported"] = True
        try:
            peer.sendall(_STATUS.pack(b"=", outcome["code"]))
        except OSError:
            pass

    def relay_signals() -> None:
        while True:
            try:
                data = peer.recv(64)
            except OSError:
                return
            if not data:  # the caller died: as if its supervisor had stopped it
                if not outcome["reported"]:
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            for signum in data:
                os.kill(os.getpid(), signum)

    atexit.register(report)
    threading.Thread(target=relay_signals, name="judgeflow-host-signals", daemon=True).start()
    try:
        from judgeflow.cli import run_forked

        outcome["code"] = run_forked(message["argv"])
    except BaseException:  # as Python reports an uncaught exception
        traceback.print_exc()
        outcome["code"] = 1
    sys.exit(outcome["code"])


def _handle(conn: socket.socket, listener: socket.socket) -> list[int]:
    """Fork a worker per pipe pair of one request, or the process of a run;
    returns their pids."""
    try:
        message, fds = _receive(conn)
    except (EOFError, OSError, ValueError):
        return []
    if message.get("kind") == "run":
        pid = os.fork()
        if pid == 0:
            _become_run(conn, listener, fds, message)  # leaves the process, never returns
        for fd in fds:
            os.close(fd)
        # the command's name only: its options are the caller's business
        _log(f"forked pid {pid} for `judgeflow {(message['argv'] or ['?'])[0]}` (cwd {message['cwd']})")
        return [pid]
    pairs, stderr_fd = fds[:-1], fds[-1]
    children = []
    for i in range(0, len(pairs) - 1, 2):
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                conn.close()
                for fd in pairs[:i] + pairs[i + 2:]:
                    os.close(fd)
                _serve_forked(pairs[i], pairs[i + 1], stderr_fd, message)
            finally:
                os._exit(1)
        children.append(pid)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(_ACK)
    except OSError:  # the run did not wait for the answer
        pass
    return children


def main(argv: list[str] | None = None) -> int:
    import argparse
    import gc
    import selectors

    parser = argparse.ArgumentParser(description="judgeflow's judge host (started by judgeflow, not by hand)")
    parser.add_argument("--fingerprint", required=True)
    parser.add_argument("--idle", type=float, required=True, help="exit after this many seconds without a worker")
    args = parser.parse_args(argv)
    directory = Path.cwd()
    # Ctrl-C never reaches it (own session); SIGTERM (judgeflow stop, a newer host) ends it
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(*_):
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = directory / SOCKET_NAME
    try:
        # bound before litellm's import: a run can queue its request at once
        listener.bind(SOCKET_NAME)  # relative to its directory, its working directory: no path length limit
        os.chmod(SOCKET_NAME, 0o600)
        listener.listen(64)
        started_at = time.time()

        def record(**more) -> None:
            (directory / STATE_NAME).write_text(json.dumps(
                {"pid": os.getpid(), "fingerprint": args.fingerprint, "started_at": started_at, **more}
            ))

        record()
        from judgeflow.judge import litellm_judge  # the point of this process

        litellm_judge.preload()  # and what each worker's first calls would import
        import judgeflow.judge.worker  # noqa: F401
        import judgeflow.metrics.hallucination.schema  # noqa: F401 - the response formats requests name
        import judgeflow.metrics.toxicity.schema  # noqa: F401

        # out of the collector's way, and shared copy-on-write with every fork
        gc.freeze()
        record(ready=True)
        runs_ready = False
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        children: set[int] = set()
        last_busy = time.monotonic()
        while True:
            if selector.select(timeout=0.2):
                conn, _ = listener.accept()
                with conn:
                    children.update(_handle(conn, listener))
            elif not runs_ready and not children:
                # Once idle, with no worker or run of its own (they come first: the
                # run that started it is waiting for its workers, and then needs the
                # CPU): what a `judgeflow score` imports (Prefect, the flows, ~1.5 s),
                # so the commands it forks start with them.
                runs_ready = True
                try:
                    from judgeflow import cli

                    cli.preload()
                except Exception as exc:  # noqa: BLE001 - workers still served; commands run in their own processes
                    _log(f"not taking runs: importing what they need failed: {exc!r}")
                    continue
                gc.freeze()
                record(ready=True, runs=True)
                _log("ready for runs")
            reap_exited(children)  # reaped here, their CPU counts in this process's children
            if children:
                last_busy = time.monotonic()
            elif time.monotonic() - last_busy >= args.idle:
                return 0
    except _Stop:
        return 0
    finally:
        listener.close()
        try:  # only our own files: a newer host may own the directory by now
            if json.loads((directory / STATE_NAME).read_text()).get("pid") == os.getpid():
                (directory / STATE_NAME).unlink(missing_ok=True)
                path.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    sys.exit(main())
