"""Hooked bodies decoded and encoded off the event loop (docker.bodies), and what does not decode."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from tests.kits.docker import WAIT_SECONDS, FakeDockerd, docker_mode_proxy, exchange, read_head

from runtimeproxy.docker import bodies
from runtimeproxy.docker import hooks as docker_hooks
from runtimeproxy.docker.bodies import C_CODEC_MAX_BYTES, decode_body, encode_body
from runtimeproxy.docker.messages import BodyError
from runtimeproxy.options import ProxyOptions


def _nested(depth: int) -> bytes:
    return b'{"Image":"busybox","X":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("data", [b"not json", b"[1]", b'"x"', b'{"a":\xff}', _nested(9_999), _nested(1_000_000)],
                         ids=["not-json", "array", "string", "not-utf8-outside-a-string", "depth-9999", "depth-1e6"])
def test_what_is_not_a_json_object_hooks_can_read_is_a_body_error(data: bytes) -> None:
    with pytest.raises(BodyError):  # never a RecursionError: that is a 500 with a traceback
        decode_body(data)


def test_a_body_nested_near_the_recursion_limit_is_read_or_a_body_error() -> None:
    """Python 3.11's C scanner runs out of recursion at this depth, 3.13's does not: either way no
    RecursionError escapes (that would be a 500 with a traceback)."""
    try:
        body = decode_body(_nested(990))
    except BodyError:
        return
    assert body["Image"] == "busybox"


@pytest.mark.parametrize("size", [0, C_CODEC_MAX_BYTES + 1], ids=["small", "large"])
def test_strings_are_read_as_dockerds_go_decoder_reads_them(size: int) -> None:
    """Each byte that is not UTF-8 and each lone surrogate escape is one U+FFFD (dockerd accepts such a body:
    refusing to read it would let it past the hooks); a surrogate pair is its character."""
    data = (b'{"Env":["S=\xff\xfepass\xe2\x82","P=\\ud800x\\udfff","Q=\\ud83d\\ude00"],'
            b'"Labels":{"\\udc00k":"v"},"Pad":"' + b"p" * size + b'"}')
    body = decode_body(data)
    assert body["Env"] == ["S=\ufffd\ufffdpass\ufffd\ufffd", "P=\ufffdx\ufffd", "Q=\U0001f600"]
    assert body["Labels"] == {"\ufffdk": "v"}


def test_large_bodies_decode_and_encode_as_small_ones_do() -> None:
    body = {"Image": "busybox", "Labels": {f"k{i}": "v" * 50 for i in range(5_000)}, "Env": ["A=\u00e9"],
            "HostConfig": {"CpuShares": 2, "Memory": 1 << 30, "Nested": [[{"x": None, "y": 1.5, "z": True}]]}}
    data = json.dumps(body).encode()
    assert len(data) > C_CODEC_MAX_BYTES
    assert decode_body(data) == body
    assert json.loads(encode_body(body, len(data))) == body


def _options(tmp_path: Path) -> ProxyOptions:
    return ProxyOptions(listen_path=tmp_path / "proxy.sock", runtime_path=tmp_path / "dockerd.sock",
                        backend_mode="Docker", hook_config_dir=tmp_path / "hooks")


async def _answering_dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """`[]` to the store's list, `201` to a create, `OK` to anything else."""
    while True:
        try:
            head = await read_head(reader)
        except asyncio.IncompleteReadError:
            return
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        body = b"[]" if b"/containers/json" in head else b'{"Id":"c1"}' if b"/create" in head else b"OK"
        status = b"201 Created" if b"/create" in head else b"200 OK"
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()


@pytest.mark.parametrize("module, step, labels", [
    (bodies, "decode_body", 0),
    (docker_hooks, "sandbox_of_create", 2_000),  # a large body's pod is decoded off the loop too
], ids=["decode", "hook-request"])
def test_other_clients_are_served_while_a_hooked_body_is_converted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: object, step: str, labels: int) -> None:
    """The step is held until a `_ping` on another connection was answered: on the event loop the
    `_ping` could not be answered before the step ended (ordering, not durations)."""
    entered, released = threading.Event(), threading.Event()
    order: list[str] = []
    original = getattr(module, step)

    def held(*args: object) -> object:
        entered.set()
        released.wait(WAIT_SECONDS)
        order.append("step finished")
        return original(*args)

    monkeypatch.setattr(module, step, held)

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _answering_dockerd):
            proxy = docker_mode_proxy(_options(tmp_path))  # the real hooks: every create body is decoded
            await proxy.start()
            try:
                body = json.dumps({"Image": "pause", "Labels": {
                    "io.kubernetes.docker.type": "podsandbox", **{f"k{i}": "v" * 50 for i in range(labels)}}}).encode()
                creator = await asyncio.open_unix_connection(str(proxy.options.listen_path))
                create = asyncio.create_task(exchange(*creator, (
                    b"POST /v1.41/containers/create?name=k8s_POD_web_ns_u-1_0 HTTP/1.1\r\nHost: \r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))))
                assert await asyncio.to_thread(entered.wait, WAIT_SECONDS)
                pinger = await asyncio.open_unix_connection(str(proxy.options.listen_path))
                response, answer = await exchange(*pinger, b"GET /_ping HTTP/1.1\r\nHost: \r\n\r\n")
                assert (response.status_code, answer) == (200, b"OK")
                order.append("ping answered")
                released.set()
                response, _ = await asyncio.wait_for(create, WAIT_SECONDS)
                assert response.status_code == 201
            finally:
                released.set()
                await proxy.stop(0)

    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_SECONDS))
    assert order[:2] == ["ping answered", "step finished"]  # (the answer is decoded too)
