"""The Docker relay against a scripted fake dockerd: headers, streaming, upgrades, faults."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from pathlib import Path

import pytest

from tests.kits.docker import WAIT_SECONDS, FakeDockerd, docker_mode_proxy, docker_proxy, exchange, header_lines, read_head

from runtimeproxy.activation import InheritedSockets, PassedSocket
from runtimeproxy.app import Proxy
from runtimeproxy.docker.interception import PassThrough
from runtimeproxy.options import ProxyOptions

OK_BODY = b'{"ApiVersion":"1.41"}'
OK_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5\r\n"
             b"Connection: keep-alive\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_BODY), OK_BODY))


def run(scenario: object) -> None:
    asyncio.run(asyncio.wait_for(scenario, 3 * WAIT_SECONDS))  # type: ignore[arg-type]


def test_headers_cross_with_empty_host_and_without_hop_by_hop(tmp_path: Path) -> None:
    heads: list[bytes] = []

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                heads.append(await read_head(reader))
            except asyncio.IncompleteReadError:
                return
            writer.write(OK_ANSWER)

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd) as fake, docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            request = (b"GET /v1.41/version HTTP/1.1\r\nHost: \r\nX-Registry-Auth: e30=\r\n"
                       b"Connection: keep-alive, X-Per-Hop\r\nX-Per-Hop: 1\r\nKeep-Alive: timeout=5\r\n"
                       b"User-Agent: Go-http-client/1.1\r\n\r\n")
            for _ in range(2):
                response, body = await exchange(reader, writer, request)
                assert response.status_code == 200 and body == OK_BODY
                names = {name.lower() for name, _ in response.headers}
                assert b"keep-alive" not in names and b"content-type" in names
            writer.close()
            assert fake.connections == 1  # the upstream connection is kept and reused
        assert header_lines(heads[0]) == [
            b"Host: ", b"X-Registry-Auth: e30=", b"User-Agent: Go-http-client/1.1"]

    run(scenario())


def test_chunked_upload_streams_chunk_by_chunk(tmp_path: Path) -> None:
    first_chunk_arrived = asyncio.Event()
    received: list[bytes] = []

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        received.append(head)
        received.append(await reader.readuntil(b"first\r\n"))
        first_chunk_arrived.set()
        received.append(await reader.readuntil(b"0\r\n\r\n"))
        writer.write(OK_ANSWER)

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"POST /images/load HTTP/1.1\r\nHost: docker\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\nfirst\r\n")
            await writer.drain()
            await asyncio.wait_for(first_chunk_arrived.wait(), WAIT_SECONDS)  # before the rest is sent
            response, _ = await exchange(reader, writer, b"6\r\nsecond\r\n0\r\n\r\n")
            assert response.status_code == 200
        assert b"Transfer-Encoding: chunked" in received[0]
        assert b"".join(received[1:]).endswith(b"6\r\nsecond\r\n0\r\n\r\n")

    run(scenario())


def test_streamed_answer_is_flushed_as_it_arrives(tmp_path: Path) -> None:
    client_got_first = asyncio.Event()

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"6\r\nevent1\r\n")
        await asyncio.wait_for(client_got_first.wait(), WAIT_SECONDS)
        writer.write(b"6\r\nevent2\r\n0\r\n\r\n")

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n")
            await read_head(reader)
            assert await asyncio.wait_for(reader.readuntil(b"event1\r\n"), WAIT_SECONDS)
            client_got_first.set()
            assert (await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), WAIT_SECONDS)).endswith(
                b"event2\r\n0\r\n\r\n")

    run(scenario())


def test_client_going_away_closes_the_upstream_stream(tmp_path: Path) -> None:
    upstream_saw_eof = asyncio.Event()

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nevent1\r\n")
        assert await asyncio.wait_for(reader.read(), WAIT_SECONDS) == b""
        upstream_saw_eof.set()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n")
            await asyncio.wait_for(reader.readuntil(b"event1\r\n"), WAIT_SECONDS)
            writer.close()
            await asyncio.wait_for(upstream_saw_eof.wait(), WAIT_SECONDS)

    run(scenario())


def test_upgrade_carries_raw_bytes_with_half_close(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        assert b"Connection: Upgrade" in head and b"Upgrade: tcp" in head
        await reader.readexactly(2)  # the {} body
        writer.write(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                     b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\nready;")
        stdin = await asyncio.wait_for(reader.read(), WAIT_SECONDS)  # until the client's EOF
        writer.write(b"echo:" + stdin)  # output still flows after stdin ended
        await writer.drain()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"POST /v1.41/exec/abc/start HTTP/1.1\r\nHost: \r\nConnection: Upgrade\r\n"
                         b"Upgrade: tcp\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            head = await read_head(reader)
            assert head.startswith(b"HTTP/1.1 101 UPGRADED\r\n")
            assert {b"Connection: Upgrade", b"Upgrade: tcp"} <= set(header_lines(head))
            assert await asyncio.wait_for(reader.readexactly(6), WAIT_SECONDS) == b"ready;"
            writer.write(b"hi\n")
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), WAIT_SECONDS) == b"echo:hi\n"

    run(scenario())


def test_dockerd_down_is_a_json_503_naming_the_socket(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with docker_proxy(tmp_path) as proxy:
            for _ in range(2):
                reader, writer = await asyncio.open_unix_connection(str(proxy))
                response, body = await exchange(reader, writer, b"GET /_ping HTTP/1.1\r\nHost: \r\n\r\n")
                assert response.status_code == 503
                assert (b"content-type", b"application/json") in list(response.headers)
                assert f"unix://{tmp_path / 'dockerd.sock'}" in json.loads(body)["message"]

    with caplog.at_level(logging.WARNING, logger="runtimeproxy.docker"):
        run(scenario())
    assert len([r for r in caplog.records if "cannot reach dockerd" in r.getMessage()]) == 1  # not per request


def test_dockerd_hanging_up_before_answering_is_a_502(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)  # then close without a word

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, body = await exchange(reader, writer, b"GET /info HTTP/1.1\r\nHost: \r\n\r\n")
        assert response.status_code == 502
        assert "dockerd closed the connection before" in json.loads(body)["message"]

    run(scenario())


def test_garbage_gets_400_and_the_connection_closes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"\x16\x03\x01 not http at all\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), WAIT_SECONDS)  # read() ends: connection closed
            assert answer.startswith(b"HTTP/1.1 400 ")
            assert b'"message": "malformed HTTP request' in answer
            # the proxy still serves other connections
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, _ = await exchange(reader, writer, b"GET /_ping HTTP/1.1\r\nHost: \r\n\r\n")
            assert response.status_code == 503

    run(scenario())


def test_http_1_0_client_without_host_gets_a_close_delimited_answer(tmp_path: Path) -> None:
    heads: list[bytes] = []

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await read_head(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nOK\r\n0\r\n\r\n")

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"GET /_ping HTTP/1.0\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), WAIT_SECONDS)
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nOK")
        assert header_lines(heads[0]) == [b"Host: "]

    run(scenario())


def test_shutdown_closes_idle_connections_and_cuts_streams_after_the_grace(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await read_head(reader)
            if b"/events" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nevent1\r\n")
                await reader.read()  # a stream that never ends by itself
                return
            writer.write(OK_ANSWER)

    async def scenario() -> None:
        options = ProxyOptions(listen_path=tmp_path / "proxy.sock", runtime_path=tmp_path / "dockerd.sock")
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd):
            proxy = docker_mode_proxy(options)
            await proxy.start()
            idle_reader, idle_writer = await asyncio.open_unix_connection(str(options.listen_path))
            response, _ = await exchange(idle_reader, idle_writer, b"GET /_ping HTTP/1.1\r\nHost: \r\n\r\n")
            assert response.status_code == 200
            stream_reader, stream_writer = await asyncio.open_unix_connection(str(options.listen_path))
            stream_writer.write(b"GET /events HTTP/1.1\r\nHost: \r\n\r\n")
            await asyncio.wait_for(stream_reader.readuntil(b"event1\r\n"), WAIT_SECONDS)
            await proxy.stop(grace=0.1)
            assert await asyncio.wait_for(idle_reader.read(), WAIT_SECONDS) == b""
            assert await asyncio.wait_for(stream_reader.read(), WAIT_SECONDS) == b""  # cut, not finished
            assert not options.listen_path.exists()

    run(scenario())


def test_hijack_without_upgrade_becomes_a_raw_stream_too(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        assert b"Upgrade" not in head
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\nready;")
        stdin = await asyncio.wait_for(reader.read(), WAIT_SECONDS)
        writer.write(b"echo:" + stdin)
        await writer.drain()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(b"POST /containers/abc/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\nHost: \r\n\r\n")
            head = await read_head(reader)
            assert head == b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n"
            assert await asyncio.wait_for(reader.readexactly(6), WAIT_SECONDS) == b"ready;"
            writer.write(b"hi\n")
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), WAIT_SECONDS) == b"echo:hi\n"

    run(scenario())


def _recording_dockerd(received: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    """Reads one request with h11 (as dockerd would frame it), records head and body, answers 201."""
    import h11

    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(head + await reader.read(65536))
        body = b""
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                conn.receive_data(await asyncio.wait_for(reader.read(65536), WAIT_SECONDS))
            elif isinstance(event, h11.Data):
                body += event.data
        received.append((head, body))
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()

    return dockerd


@pytest.mark.parametrize("framing, expected", [
    (b"Connection: Content-Length\r\nContent-Length: 12\r\n\r\n{\"Name\":\"v\"}", b"Content-Length: 12"),
    (b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\nc\r\n{\"Name\":\"v\"}\r\n0\r\n\r\n",
     b"Transfer-Encoding: chunked"),
], ids=["connection-names-content-length", "content-length-and-chunked"])
def test_the_body_crosses_with_exactly_one_framing_header(tmp_path: Path, framing: bytes, expected: bytes) -> None:
    received: list[tuple[bytes, bytes]] = []

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _recording_dockerd(received)), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, _ = await exchange(reader, writer, b"POST /v1.41/volumes/create HTTP/1.1\r\nHost: \r\n" + framing)
            assert response.status_code == 201

    run(scenario())
    [(head, body)] = received
    framing_lines = [line for line in header_lines(head)
                     if line.lower().startswith((b"content-length", b"transfer-encoding"))]
    assert (framing_lines, body) == ([expected], b'{"Name":"v"}')


def test_a_session_ended_by_an_aborted_upload_is_freed_without_the_cycle_collector(tmp_path: Path) -> None:
    """An aborted 15 MiB hooked upload: nothing of the session may sit in a reference cycle (an idle
    process rarely runs the full collection that would free it)."""
    import gc
    import weakref

    from runtimeproxy.docker.interception import PassThrough

    async def scenario() -> None:
        options = ProxyOptions(listen_path=tmp_path / "proxy.sock", runtime_path=tmp_path / "dockerd.sock",
                               backend_mode="Docker", hook_config_dir=tmp_path / "hooks")
        proxy = docker_mode_proxy(options, PassThrough())
        await proxy.start()
        try:
            _, writer = await asyncio.open_unix_connection(str(options.listen_path))
            writer.write(b"POST /v1.41/containers/create HTTP/1.1\r\nHost: \r\nContent-Length: %d\r\n\r\n"
                         % (16 * 1024 * 1024))
            for _ in range(15):
                writer.write(b"x" * (1024 * 1024))
                await writer.drain()
            while not proxy.frontend._sessions:
                await asyncio.sleep(0.01)
            [(task, session)] = proxy.frontend._sessions.items()
            freed = weakref.ref(session)
            del session
            writer.close()
            await asyncio.wait_for(task, WAIT_SECONDS)
            del task
            await asyncio.sleep(0)
            assert freed() is None
        finally:
            await proxy.stop(0)

    gc.collect()
    gc.disable()
    try:
        run(scenario())
    finally:
        gc.enable()


def test_declined_upgrade_keeps_the_connection_for_the_next_request(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                head = await read_head(reader)
            except asyncio.IncompleteReadError:
                return
            if b"Upgrade: tcp" in head:
                await reader.readexactly(2)
                body = b'{"message":"no such exec"}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                writer.write(OK_ANSWER)

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd), docker_proxy(tmp_path) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, _ = await exchange(reader, writer, (
                b"POST /v1.41/exec/nope/start HTTP/1.1\r\nHost: \r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
            assert response.status_code == 404
            response, body = await exchange(reader, writer, b"GET /v1.41/version HTTP/1.1\r\nHost: \r\n\r\n")
            assert response.status_code == 200 and body == OK_BODY

    run(scenario())


def test_the_socket_systemd_passed_is_served_and_queues_requests_between_two_proxies(tmp_path: Path) -> None:
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_head(reader)
        writer.write(OK_ANSWER)
        await writer.drain()

    path = tmp_path / "proxy.sock"
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # systemd's copy, outliving both proxies
    held.bind(str(path))
    os.chmod(path, 0o660)
    held.listen()
    options = ProxyOptions(listen_path=path, runtime_path=tmp_path / "dockerd.sock", backend_mode="Docker",
                           hook_config_dir=tmp_path / "hooks")

    async def started_proxy() -> Proxy:
        proxy = docker_mode_proxy(options, PassThrough(),
                                  InheritedSockets([PassedSocket(os.dup(held.fileno()), "docker")]))
        await proxy.start()
        return proxy

    async def scenario() -> None:
        request = b"GET /v1.41/version HTTP/1.1\r\nHost: docker\r\n\r\n"
        async with FakeDockerd(tmp_path / "dockerd.sock", dockerd):
            first = await started_proxy()
            response, body = await exchange(*await asyncio.open_unix_connection(str(path)), request)
            assert response.status_code == 200 and body == OK_BODY
            await first.stop(0)
            assert path.exists()  # systemd's: never removed
            waiting = await asyncio.open_unix_connection(str(path))  # no proxy: in the backlog, not refused
            second = await started_proxy()
            response, body = await exchange(*waiting, request)
            assert response.status_code == 200 and body == OK_BODY
            await second.stop(0)

    try:
        run(scenario())
    finally:
        held.close()
