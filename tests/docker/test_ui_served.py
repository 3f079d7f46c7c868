"""The image's Prefect server serves its UI as the image's user.

In the image the venv belongs to root and the server runs as an unprivileged
user (uid 10001): Prefect copies its UI bundle to a writable directory at its
first start, and where it cannot, ``http://localhost:4200/`` answers 404. No
Docker engine here, so the image's situation is rebuilt: Prefect's package is
copied to a directory the server's user cannot write (as the venv is in the
image), and ``prefect server start`` runs with the environment the
Dockerfile's runtime stage sets, its home directory moved to a temporary one
the server's user owns (as ``useradd --create-home`` makes it). When the suite
runs as root, the server runs as root without the capabilities that let root
write where its permissions say no (``setpriv``): an unprivileged account
(the suite's ``postgres``) could not execute this venv's interpreter, which
lives under ``/root`` (mode 0700)."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import prefect
import pytest

from tests.docker.test_compose import DOCKER, instructions

IMAGE_HOME = "/home/judgeflow"
IMAGE_VENV_BIN = "/opt/venv/bin"
# what lets root write into a directory whose mode forbids it (capabilities(7))
PERMISSION_OVERRIDES = "-dac_override,-dac_read_search,-fowner"


def runtime_environment() -> dict[str, str]:
    """The ENV of the Dockerfile's last stage, as `docker run` would see it."""
    ops = instructions((DOCKER / "Dockerfile").read_text())
    last_from = max(i for i, (op, _) in enumerate(ops) if op == "FROM")
    env: dict[str, str] = {}
    for op, args in ops[last_from:]:
        if op == "ENV":
            for item in shlex.split(args):
                name, _, value = item.partition("=")
                env[name] = value
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


def test_the_ui_static_directory_is_the_users_to_write():
    """The setting the slow test below proves: the UI is copied under the
    image user's home, not into the root-owned venv."""
    env = runtime_environment()
    static = env.get("PREFECT_UI_STATIC_DIRECTORY", "")
    assert static.startswith(IMAGE_HOME + "/"), "PREFECT_UI_STATIC_DIRECTORY must be under the image user's home"
    ops = instructions((DOCKER / "Dockerfile").read_text())
    last_from = max(i for i, (op, _) in enumerate(ops) if op == "FROM")
    [useradd] = [args for op, args in ops[last_from:] if op == "RUN" and "useradd" in args]
    assert f"--home-dir {IMAGE_HOME}" in useradd and "--create-home" in useradd
    [user] = [args for op, args in ops[last_from:] if op == "USER"]
    assert user.split(":")[0] in useradd  # the server's user owns that home


@pytest.fixture
def image_like_install():
    """(site directory holding a read-only copy of Prefect, a home the server's user owns)."""
    base = Path(tempfile.mkdtemp(prefix="judgeflow-test-ui-"))  # /tmp: the other account reaches it
    os.chmod(base, 0o755)
    site = base / "site"
    package = Path(prefect.__file__).parent
    # without the UI copies an earlier server (run as root from this venv) left;
    # files hard-linked where they can be (only directories' modes change)
    shutil.copytree(package, site / "prefect", symlinks=True, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns("ui_build", "ui_v2_build", "__pycache__"))
    home = base / "home"
    home.mkdir()
    for directory, _, _ in os.walk(site):  # no one may write there, as the image's user may not in its venv
        os.chmod(directory, 0o555)
    yield site, home
    for directory, _, _ in os.walk(site):
        os.chmod(directory, 0o755)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow  # a Prefect server's start: 13-30 s on a busy 2-core machine
def test_the_images_user_is_served_the_prefect_ui(image_like_install):
    site, home = image_like_install
    env = runtime_environment()
    assert env.get("PREFECT_HOME", "").startswith(IMAGE_HOME)
    env = {name: value.replace(IMAGE_HOME, str(home)) for name, value in env.items()}
    env["PATH"] = env.get("PATH", "$PATH").replace(IMAGE_VENV_BIN, str(Path(sys.executable).parent)).replace(
        "$PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=str(home), PYTHONPATH=str(site), LANG="C.UTF-8")
    port = _free_port()
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port),
            "--no-services"]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        argv = [setpriv, f"--bounding-set={PERMISSION_OVERRIDES}", "--inh-caps=-all", "--", *argv]
    log = home.parent / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(argv, env=env, cwd=str(home), stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a busy 2-core machine: ~10-20 s
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if _get(f"http://127.0.0.1:{port}/api/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        output = log.read_text(errors="replace")
        assert server.poll() is None, output
        # the server really is the read-only copy, as the image's is its root-owned venv
        assert f"{site}/prefect" in subprocess.run(
            [*argv[: argv.index(sys.executable) + 1], "-c", "import prefect; print(prefect.__file__)"],
            env=env, capture_output=True, text=True, cwd=str(home)).stdout
        status, body = _get(f"http://127.0.0.1:{port}/")
        output = log.read_text(errors="replace")
        assert status == 200, f"GET / answered {status}: {body[:200]}\n{output}"
        assert "<html" in body.lower() and "<script" in body.lower(), body[:500]
        assert "UI static directory" not in output, output
    finally:
        _stop(server)


def _stop(server: subprocess.Popen) -> None:
    """The server's process group (it runs in a session of its own)."""
    for sig, wait_s in ((15, 30), (9, 10)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
