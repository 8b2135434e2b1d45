"""The docker CLI through the proxy in Docker mode, each command compared with the same one direct.

Real parts: a private dockerd (Debian's docker.io), the proxy process, the docker CLI.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

from rplab.docker_images import build_docker_archives
from rplab.dockerd import DockerModeProxy
from rplab.images import BUSYBOX_IMAGE, PAUSE_IMAGE

from docker_fixtures import Docker
from tests.kits.machine import IMAGE_CACHE

STREAM_WAIT_SECONDS = 30.0


def _name(kind: str) -> str:
    return f"rp-{kind}-{uuid.uuid4().hex[:8]}"


def _run_detached(docker: Docker, *command: str, interactive: bool = False) -> str:
    name = _name("c")
    docker.out("run", "-d", *(["-i"] if interactive else []), "--label", "rp-test=1", "--name", name,
               BUSYBOX_IMAGE, *command)
    return name


def test_version(both: list[Docker]) -> None:
    fmt = "{{.Server.Version}} {{.Server.APIVersion}} {{.Server.Os}}"
    proxied, direct = (docker.out("version", "--format", fmt) for docker in both)
    assert proxied == direct and proxied.strip()


def test_run_rm_output_and_exit_code(both: list[Docker]) -> None:
    # No network: dockerd's "IPv4 forwarding is disabled" warning follows a host sysctl other tests may flip.
    results = [docker.run("run", "--rm", "--network", "none", "--label", "rp-test=1", BUSYBOX_IMAGE, "sh", "-c",
                          "echo out; echo err >&2; exit 3", check=False) for docker in both]
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(3, "out\n", "err\n")] * 2


def test_logs_follow_streams_until_the_container_exits(both: list[Docker]) -> None:
    for docker in both:
        name = _run_detached(docker, "sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done")
        assert docker.out("logs", "-f", name) == "line1\nline2\nline3\n"


def test_exec_stdin_eof_reaches_the_container(both: list[Docker]) -> None:
    for docker in both:
        name = _run_detached(docker, "sleep", "300")
        # cat only exits when stdin's EOF crosses the proxy (half-close), while its output still flows back
        assert docker.out("exec", "-i", name, "cat", input_text="hi\n") == "hi\n"
        result = docker.run("exec", name, "sh", "-c", "echo out; echo err >&2; exit 4", check=False)
        assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "err\n")


def _first_line(process: subprocess.Popen[str]) -> str:
    """The process's first stdout line; it is killed if none comes within the bound."""
    watchdog = threading.Timer(STREAM_WAIT_SECONDS, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        return process.stdout.readline()
    finally:
        watchdog.cancel()


def test_attach_with_stdin(both: list[Docker]) -> None:
    for docker in both:
        name = _run_detached(docker, "sh", "-c", "read line; echo got:$line", interactive=True)
        # stdin stays open until the answer is back: dockerd may drop output that races a stdin EOF
        attach = subprocess.Popen(docker.argv("attach", name), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert attach.stdin is not None
        attach.stdin.write("hello\n")
        attach.stdin.flush()
        try:
            assert _first_line(attach) == "got:hello\n"
        finally:
            attach.stdin.close()
            assert attach.wait(STREAM_WAIT_SECONDS) == 0


def test_events_are_streamed_as_they_happen(both: list[Docker]) -> None:
    proxied, direct = both
    since = str(int(time.time()) - 1)
    label = f"rp-events={uuid.uuid4().hex[:8]}"
    # --since: the CLI subscribes asynchronously, and a stream without it has only what happens after that (a
    # create that raced the subscription was missed once); with it, the stream still stays open for what follows.
    watcher = subprocess.Popen(proxied.argv("events", "--since", since, "--filter", f"label={label}", "--format",
                                            "{{.Action}}"), stdout=subprocess.PIPE, text=True)
    try:
        name = _name("ev")
        proxied.out("create", "--label", "rp-test=1", "--label", label, "--name", name, BUSYBOX_IMAGE, "true")
        assert _first_line(watcher).strip() == "create"  # arrives while the stream is still open
    finally:
        watcher.kill()
        watcher.wait()
    proxied.out("rm", name)
    until = str(int(time.time()) + 1)
    history = [docker.out("events", "--since", since, "--until", until, "--filter", f"label={label}",
                          "--format", "{{.Action}}").split() for docker in both]
    assert history[0] == history[1] == ["create", "destroy"]


def test_inspect_and_rm_f(both: list[Docker]) -> None:
    proxied, direct = both
    name = _run_detached(proxied, "sleep", "300")
    assert json.loads(proxied.out("inspect", name)) == json.loads(direct.out("inspect", name))
    assert proxied.out("rm", "-f", name).strip() == name
    assert direct.run("inspect", name, check=False).returncode != 0


def test_load_uploads_a_chunked_body(both: list[Docker]) -> None:
    archive = build_docker_archives(IMAGE_CACHE)[PAUSE_IMAGE]
    outputs = [docker.out("load", "-i", str(archive)) for docker in both]
    assert outputs == [f"Loaded image: {PAUSE_IMAGE}\n"] * 2


def test_dockerd_down_is_reported_naming_its_socket(workdir: Path) -> None:
    absent = workdir / "dkdown" / "absent.sock"
    proxy = DockerModeProxy(workdir / "dkdown" / "rp.sock", absent)
    proxy.start(wait_serving=False)
    try:
        result = Docker(proxy.listen_path).run("info", check=False)
        assert result.returncode != 0
        # The CLI shows the proxy's error answer: on stderr from CLI 23 on, on stdout before (Debian 12's 20.10).
        assert f"cannot reach dockerd at unix://{absent}" in result.stderr + result.stdout
    finally:
        assert proxy.stop() == 0  # SIGTERM: clean exit, socket removed
    assert not proxy.listen_path.exists()


def _raw_attach(socket_path: Path, name: str, stdin: bytes) -> tuple[bytes, bytes]:
    """An old-style attach (no Upgrade asked): dockerd answers 200 and the connection carries raw bytes."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(STREAM_WAIT_SECONDS)
        conn.connect(str(socket_path))
        conn.sendall(f"POST /v1.41/containers/{name}/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\n"
                     "Host: \r\nContent-Length: 0\r\n\r\n".encode())
        received = b""
        while b"\r\n\r\n" not in received:
            received += conn.recv(4096)
        head, _, output = received.partition(b"\r\n\r\n")
        conn.sendall(stdin)
        while chunk := conn.recv(4096):  # until dockerd closes: the container exited
            output += chunk
    return head, output


def test_attach_without_upgrade_carries_raw_bytes(both: list[Docker]) -> None:
    for docker in both:
        name = _run_detached(docker, "sh", "-c", "read line; echo got:$line", interactive=True)
        head, output = _raw_attach(docker.socket, name, b"hello\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"got:hello\n" in output  # inside the stream's 8-byte frame header
