"""The hook seam of the Docker relay: whole bodies on hooked routes, rewrite before, report after (or replace the
answer with an error)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.kits.docker import WAIT_SECONDS, FakeDockerd, docker_proxy, exchange, read_head

from runtimeproxy.docker.interception import ErrorReply, InterceptedCall, PassThrough, UpstreamAnswer
from runtimeproxy.docker.routes import HookedRoute, hooked_route, is_hijack_route, routed_path

CREATED = b'{"Id":"c0ffee","Warnings":[]}'


class RecordingRewriter(PassThrough):
    """Adds a label to create bodies, or refuses everything; records what it saw."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.before_calls: list[tuple[InterceptedCall, bytes]] = []
        self.answers: list[UpstreamAnswer] = []

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        self.before_calls.append((call, body))
        if self.refuse:
            return ErrorReply(409, "refused by a plugin")
        document = json.loads(body)
        document["Labels"]["hooked"] = "yes"
        return json.dumps(document).encode()

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> None:
        self.answers.append(answer)


def _capturing_dockerd(bodies: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        bodies.append((head, await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(CREATED), CREATED))
        await writer.drain()

    return dockerd


def _create_request(body: bytes, chunked: bool = False) -> bytes:
    head = b"POST /v1.41/containers/create?name=k8s_POD_p_ns_uid_0 HTTP/1.1\r\nHost: \r\n"
    if chunked:
        return head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def test_rewritten_body_is_forwarded_and_after_sees_the_answer(tmp_path: Path) -> None:
    bodies: list[tuple[bytes, bytes]] = []
    rewriter = RecordingRewriter()
    original = json.dumps({"Image": "pause", "Labels": {"io.kubernetes.docker.type": "podsandbox"}}).encode()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _capturing_dockerd(bodies)), \
                docker_proxy(tmp_path, rewriter) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, body = await exchange(reader, writer, _create_request(original, chunked=True))
            assert (response.status_code, body) == (201, CREATED)

    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_SECONDS))
    call, seen = rewriter.before_calls[0]
    assert call.match.route is HookedRoute.CREATE and seen == original
    head, forwarded = bodies[0]
    assert json.loads(forwarded)["Labels"]["hooked"] == "yes"
    assert b"Content-Length: %d\r\n" % len(forwarded) in head and b"Transfer-Encoding" not in head
    assert [(a.status, a.body) for a in rewriter.answers] == [(201, CREATED)]


def test_error_reply_answers_without_reaching_dockerd(tmp_path: Path) -> None:
    bodies: list[tuple[bytes, bytes]] = []

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _capturing_dockerd(bodies)) as fake, \
                docker_proxy(tmp_path, RecordingRewriter(refuse=True)) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, body = await exchange(reader, writer, _create_request(b'{"Labels": {}}'))
            assert response.status_code == 409
            assert json.loads(body) == {"message": "refused by a plugin"}
            assert fake.connections == 0

    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_SECONDS))


class UndoingInterceptor(RecordingRewriter):
    """Replaces dockerd's answer with an error (as an NRI plugin failing RunPodSandbox after the create)."""

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        self.answers.append(answer)
        return ErrorReply(500, "runtimeproxy: NRI RunPodSandbox hook of plugin 10-x failed")


def test_an_error_after_replaces_dockerds_answer_and_the_connection_stays_usable(tmp_path: Path) -> None:
    bodies: list[tuple[bytes, bytes]] = []
    undoing = UndoingInterceptor()
    original = json.dumps({"Image": "pause", "Labels": {"io.kubernetes.docker.type": "podsandbox"}}).encode()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _capturing_dockerd(bodies)), \
                docker_proxy(tmp_path, undoing) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            for _ in range(2):  # the same client connection carries the next request
                response, body = await exchange(reader, writer, _create_request(original))
                assert response.status_code == 500 and b"10-x failed" in body

    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_SECONDS))
    assert [a.status for a in undoing.answers] == [201, 201] and len(bodies) == 2


def test_pass_through_forwards_the_same_bytes(tmp_path: Path) -> None:
    bodies: list[tuple[bytes, bytes]] = []
    original = b'{"Image": "busybox", "Labels": {}}'

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _capturing_dockerd(bodies)), \
                docker_proxy(tmp_path, PassThrough()) as proxy:
            reader, writer = await asyncio.open_unix_connection(str(proxy))
            response, _ = await exchange(reader, writer, _create_request(original, chunked=True))
            assert response.status_code == 201

    asyncio.run(asyncio.wait_for(scenario(), 3 * WAIT_SECONDS))
    assert bodies[0][1] == original


@pytest.mark.parametrize(("method", "target", "route", "container_id"), [
    (b"POST", b"/v1.41/containers/create?name=k8s_POD_x", HookedRoute.CREATE, None),
    (b"POST", b"/containers/create", HookedRoute.CREATE, None),
    (b"POST", b"/v1.41/containers/abc/start", HookedRoute.START, "abc"),
    (b"POST", b"/v1.41/containers/abc/update", HookedRoute.UPDATE, "abc"),
    (b"POST", b"/v1.41/containers/abc/stop?t=10", HookedRoute.STOP, "abc"),
    (b"DELETE", b"/v1.41/containers/abc?force=1&v=1", HookedRoute.REMOVE, "abc"),
])
def test_hooked_routes(method: bytes, target: bytes, route: HookedRoute, container_id: str | None) -> None:
    match = hooked_route(method, target)
    assert match is not None and (match.route, match.container_id) == (route, container_id)


@pytest.mark.parametrize(("method", "target"), [
    (b"GET", b"/v1.41/containers/abc/json"),
    (b"POST", b"/v1.41/containers/abc/attach?stream=1"),
    (b"POST", b"/v1.41/exec/abc/start"),
    (b"DELETE", b"/v1.41/images/abc"),
    (b"GET", b"/v1.41/containers/create"),
    (b"POST", b"/v1.41/containers/abc/kill"),
])
def test_everything_else_is_pure_relay(method: bytes, target: bytes) -> None:
    assert hooked_route(method, target) is None


@pytest.mark.parametrize(("method", "target", "route", "container_id"), [
    (b"POST", b"/v1.41/containers/%63reate?name=k8s_POD_x", HookedRoute.CREATE, None),
    (b"POST", b"http://docker/v1.41/containers/create?name=x", HookedRoute.CREATE, None),
    (b"POST", b"http:/containers/create", HookedRoute.CREATE, None),
    (b"POST", b"/%761.41/containers/abc/st%6Fp?t=1", HookedRoute.STOP, "abc"),
    (b"POST", b"/v1.41./containers/abc/start", HookedRoute.START, "abc"),  # dockerd's version: [0-9.]+
    (b"DELETE", b"HTTPS://h:1/v1.41/containers/%61bc?force=1", HookedRoute.REMOVE, "abc"),
])
def test_routes_are_matched_on_the_path_dockerd_routes(method: bytes, target: bytes, route: HookedRoute,
                                                       container_id: str | None) -> None:
    match = hooked_route(method, target)
    assert match is not None and (match.route, match.container_id) == (route, container_id)


@pytest.mark.parametrize("target", [
    b"/v1.41//containers/create", b"/v1.41/./containers/create", b"/v1.41/containers/x/../create",
    b"/v1.41/containers/%2e%2e/create", b"/containers/%zzcreate", b"http://docker", b"v1.41/containers/create",
])
def test_targets_dockerd_refuses_or_redirects_are_not_routed(target: bytes) -> None:
    assert routed_path(target) is None and hooked_route(b"POST", target) is None


def test_hijack_routes() -> None:
    assert is_hijack_route(b"POST", b"/v1.41/exec/abc/start")
    assert is_hijack_route(b"POST", b"/containers/abc/attach?stream=1&stdin=1")
    assert not is_hijack_route(b"POST", b"/v1.41/containers/abc/start")
    assert not is_hijack_route(b"GET", b"/v1.41/exec/abc/json")
    assert is_hijack_route(b"POST", b"http://docker/v1.41/%65xec/abc/start")


class HeldInterceptor(PassThrough):
    """A pre step that waits (like a slow plugin call) until cancelled; records that it was."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        self.started.set()
        try:
            await asyncio.sleep(3 * WAIT_SECONDS)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return body

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> None:
        return None


def test_a_client_hanging_up_during_the_pre_step_cancels_it_and_nothing_reaches_dockerd(tmp_path: Path) -> None:
    bodies: list[tuple[bytes, bytes]] = []
    held = HeldInterceptor()

    async def scenario() -> None:
        async with FakeDockerd(tmp_path / "dockerd.sock", _capturing_dockerd(bodies)) as fake, \
                docker_proxy(tmp_path, held) as proxy:
            _, writer = await asyncio.open_unix_connection(str(proxy))
            writer.write(_create_request(b'{"Labels":{}}'))
            await asyncio.wait_for(held.started.wait(), WAIT_SECONDS)
            writer.close()
            await asyncio.wait_for(held.cancelled.wait(), WAIT_SECONDS)
            assert fake.connections == 0

    asyncio.run(scenario())
    assert bodies == []
