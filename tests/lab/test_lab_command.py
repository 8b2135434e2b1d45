"""`python -m rplab --keep` as a person uses it: it says what it made, its crictl samples are valid
CRI configs, and SIGTERM stops and removes everything (containerd, proxy, plugin, temp root, mounts)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from google.protobuf import json_format

from rplab.cri import CriClient, open_channel
from rplab.images import LAB_IMAGES
from rplab.peers import peer_binary

from machinekit import skip_or_fail
from rplab.containerd import check_prerequisites

READY_WAIT_SECONDS = 120.0


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_kept_lab_shows_what_it_made_and_sigterm_removes_everything(tmp_path: Path) -> None:
    problem = check_prerequisites()
    if problem:
        skip_or_fail(f"cannot run the lab: {problem}")
    lab = subprocess.Popen([sys.executable, "-u", "-m", "rplab", "--keep"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + READY_WAIT_SECONDS
        assert lab.stdout is not None
        while not lines or "start CONTAINER_ID" not in lines[-1]:
            line = lab.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        base = Path(next(line for line in lines if line.startswith("runtimeproxy lab in ")).split()[-1])
        output = "".join(lines)
        assert all(image in output for image in LAB_IMAGES)
        cri_socket = Path(output.split("CRI socket: ")[1].split(";")[0])
        assert cri_socket.is_socket() and "runtimeproxyctl --admin-endpoint" in output
        assert f"try:  {peer_binary('crictl')} --runtime-endpoint unix://{cri_socket}" in output  # the built crictl

        # The crictl samples are CRI configs the proxy accepts: run the pod they describe.
        with open_channel(cri_socket) as channel:
            client = CriClient(channel)
            pod = json_format.ParseDict(json.loads((base / "pod.json").read_text()), client.api.PodSandboxConfig())
            json_format.ParseDict(json.loads((base / "container.json").read_text()), client.api.ContainerConfig())
            assert client.run_pod(pod)  # left running: SIGTERM must clean it up too

        lab.send_signal(signal.SIGTERM)  # the way a kept lab is stopped: cleans up like Ctrl-C
        assert lab.wait(60) == 0
        assert "everything stopped and removed" in lab.stdout.read()
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait(10)
    assert not base.exists()
    assert _processes_mentioning(str(base)) == []
    assert str(base) not in Path("/proc/mounts").read_text()
