"""`python -m rplab --keep` as a person uses it: every command it prints works as printed (crictl from the lab
directory with the lab's crictl config and no warning, the container getting the env value the docs show;
`runtimeproxyctl … status`; the README's first plugin registered into the lab's hook directory), docs/install.md
shows those commands and sample configs, and SIGTERM, or SIGINT in a background job (which starts with SIGINT
ignored), stops and removes everything (containerd, proxy, plugin, temp root, mounts, cgroups)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, Queue

from tests.kits.docs import README, block_starting, doc_block, doc_page, fenced_blocks
from tests.kits.machine import skip_or_fail
from rplab.containerd import check_prerequisites
from rplab.images import LAB_IMAGES
from rplab.lab_guide import CGROUP_HIERARCHY, CRICTL_CONFIG_ENV
from rplab.peers import peer_binary

READY_WAIT_SECONDS = 120.0
# A kept lab stops its pods, plugin, proxy and containerd: seconds when idle, over a minute on a loaded machine.
STOP_WAIT_SECONDS = 180.0
LAST_LINE = "# FROM=crictl"
WAITING_LINE = "running until Ctrl-C or SIGTERM"
CRICTL_HEADER = "crictl, from the lab directory"
DOCS_LAB_DIR = "/tmp/rp-lab-…"
FIRST_PLUGIN_HEADER = "# my_plugin.py:"
COMMAND_SECONDS = 60


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


def read_lines(process: subprocess.Popen[str]) -> Queue[str | None]:
    """The process's output lines as they come (None at its end): a lab that never prints a line fails the test
    at a deadline instead of blocking it."""
    lines: Queue[str | None] = Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    return lines


class KeptLab:
    def __init__(self, process: subprocess.Popen[str], output: Queue[str | None], lines: list[str]) -> None:
        self.process, self.output_lines, self.lines = process, output, lines
        self.base = Path(next(line for line in lines if line.startswith("runtimeproxy lab in ")).split()[-1])
        self.output = "".join(lines)

    def field(self, name: str) -> str:
        """A path of the header it prints ("  CRI socket:     /tmp/...")."""
        return next(line for line in self.lines if line.strip().startswith(f"{name}:")).split(":", 1)[1].split()[0]

    def commands_after(self, header: str) -> list[str]:
        """The indented command lines it prints under a header line."""
        start = next(index for index, line in enumerate(self.lines) if line.startswith(header)) + 1
        commands = []
        for line in self.lines[start:]:
            if not line.startswith("  "):
                break
            commands.append(line.strip())
        return commands

    def stop(self, signum: int) -> str:
        """Send `signum`; the rest of the output once the lab has exited (0)."""
        self.process.send_signal(signum)
        assert self.process.wait(STOP_WAIT_SECONDS) == 0
        rest = []
        while (line := self.output_lines.get(timeout=10)) is not None:
            rest.append(line)
        return "".join(rest)


@contextmanager
def kept_lab(sigint_ignored: bool = False, ready: str = LAST_LINE) -> Iterator[KeptLab]:
    """The lab with --keep, once it has printed the line with `ready` (default: its guide's last); stopped at the
    end if still running. `sigint_ignored`: started as a shell starts a `&` job, with SIGINT ignored (by a shell's
    trap and exec, not a preexec_fn: a fork of this process, which has gRPC's threads, can hang or abort in gRPC's
    fork handlers before it execs)."""
    problem = check_prerequisites()
    if problem:
        skip_or_fail(f"cannot run the lab: {problem}")
    argv = [sys.executable, "-u", "-m", "rplab", "--keep"]
    if sigint_ignored:
        argv = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
    lab = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, lines = read_lines(lab), []
    try:
        deadline = time.monotonic() + READY_WAIT_SECONDS
        while not lines or ready not in lines[-1]:
            try:
                line = output.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                line = None
            assert line is not None, f"no line with {ready!r}:\n" + "".join(lines)
            lines.append(line)
        kept = KeptLab(lab, output, lines)
        yield kept
    finally:
        if lab.poll() is None:  # a failed test: let the lab clean up still (a kill would leave its pods running)
            lab.terminate()
            try:
                lab.wait(STOP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                lab.kill()
                lab.wait(10)
    assert not kept.base.exists()
    assert _processes_mentioning(str(kept.base)) == []
    assert str(kept.base) not in Path("/proc/mounts").read_text()
    assert list(Path("/sys/fs/cgroup").glob(f"*/{CGROUP_HIERARCHY}")) == []


def run_crictl_commands(commands: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The printed crictl lines as one shell script: a line that "prints X" sets $X, later lines use it."""
    script = ["set -eu"]
    for command in commands:
        line, _, comment = command.partition("  #")
        line = line.strip().replace("POD_ID", "$POD_ID").replace("CONTAINER_ID", "$CONTAINER_ID")
        if comment.strip().startswith("prints "):
            line = f"{comment.split()[-1]}=$({line})"
        script.append(line)
    return subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True,
                          timeout=COMMAND_SECONDS, env=environment)


def test_a_kept_lab_prints_commands_that_work_as_printed_and_sigterm_removes_everything(tmp_path: Path) -> None:
    with kept_lab() as lab:
        assert all(image in lab.output for image in LAB_IMAGES)
        cri_socket = Path(lab.field("CRI socket"))
        hooks = Path(lab.field("hook directory"))
        assert cri_socket.is_socket() and (hooks / "example.json").is_file()
        assert (lab.base / "crictl").resolve() == peer_binary("crictl")  # the built crictl

        # The crictl block, as printed and as docs/install.md shows it: no warning, FROM=crictl in the container.
        crictl = lab.commands_after(CRICTL_HEADER)
        documented = doc_block("docs/install.md", "lab-crictl").splitlines()
        assert [line.replace(str(lab.base), DOCS_LAB_DIR) for line in crictl] == documented
        environment = {key: value for key, value in os.environ.items() if key != CRICTL_CONFIG_ENV}
        done = run_crictl_commands(crictl, environment)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.splitlines()[-1] == "FROM=crictl"
        # The sample configs are the ones the docs show (the lab's directory aside).
        shown = [json.loads(block) for block in fenced_blocks(doc_page("install.md"), "json")[:2]]
        written = [json.loads((lab.base / name).read_text().replace(str(lab.base), DOCS_LAB_DIR))
                   for name in ("pod.json", "container.json")]
        assert written == shown

        # runtimeproxyctl by the path printed.
        [status] = lab.commands_after("status of the proxy")
        done = subprocess.run(status, shell=True, capture_output=True, text=True, timeout=COMMAND_SECONDS)
        assert done.returncode == 0 and "BACKENDS" in done.stdout, done.stdout + done.stderr

        # The README's first plugin, registered into the lab's hook directory as printed: its pods get MY_VAR=x.
        (tmp_path / "my_plugin.py").write_text(block_starting(README.read_text(), FIRST_PLUGIN_HEADER, "python"))
        [register] = lab.commands_after("a plugin of yours")
        plugin = subprocess.Popen(shlex.split(register), cwd=tmp_path)
        try:
            deadline = time.monotonic() + COMMAND_SECONDS
            while not (hooks / "my-plugin.json").exists():
                assert plugin.poll() is None and time.monotonic() < deadline, "the first plugin did not register"
                time.sleep(0.1)
            time.sleep(1)  # the proxy reads the hook directory on a change notification
            # A second container in the pod the block made (its create, start and exec lines, as printed).
            with_config = {**environment, CRICTL_CONFIG_ENV: lab.field("crictl config")}
            pod_id = subprocess.run([lab.base / "crictl", "pods", "-q"], capture_output=True, text=True, check=True,
                                    env=with_config).stdout.split()[0]
            second = [line.replace("sh -c 'echo FROM=$FROM'", "sh -c 'echo MY_VAR=$MY_VAR'") for line in crictl
                      if " runp " not in line]
            (lab.base / "container.json").write_text((lab.base / "container.json").read_text().replace(
                '"name": "demo"', '"name": "mine"'))
            done = run_crictl_commands(second, {**environment, "POD_ID": pod_id})
            assert done.returncode == 0 and done.stdout.splitlines()[-1] == "MY_VAR=x", done.stdout + done.stderr
        finally:
            plugin.terminate()
            plugin.wait(10)

        assert "everything stopped and removed" in lab.stop(signal.SIGTERM)  # left running pods: cleaned up too


def test_sigint_stops_a_lab_started_in_the_background() -> None:
    """A shell starts a `&` job with SIGINT ignored; the lab handles it anyway, as install.md promises (sent as it
    starts waiting, while it prints its guide: an interrupt then is its normal end too)."""
    with kept_lab(sigint_ignored=True, ready=WAITING_LINE) as lab:
        assert "everything stopped and removed" in lab.stop(signal.SIGINT)
