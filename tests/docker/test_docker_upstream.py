"""Reading dockerd's answers with llhttp: 1xx before the answer, bodiless answers, EOF-delimited bodies, reuse."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.kits.docker import FakeDockerd, read_head

from runtimeproxy.docker.upstream import END, AnswerHead, Upstream, UpstreamBroken

WAIT_SECONDS = 5


def answering(*answers: bytes, close: bool = False):
    async def dockerd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await read_head(reader)
            writer.write(answer)
            await writer.drain()
        if close:
            writer.close()
        else:
            await reader.read()
    return dockerd


async def events_of(upstream: Upstream, method: bytes = b"GET") -> list[object]:
    await upstream.send_head(method, b"/x", [(b"Host", b"")], end=True)
    events: list[object] = []
    while (event := await asyncio.wait_for(upstream.next_event(), WAIT_SECONDS)) is not END:
        events.append((event.status, event.reason) if isinstance(event, AnswerHead) else event)
    return events


def run_with(tmp_path: Path, handler, scenario) -> None:
    async def main() -> None:
        async with FakeDockerd(tmp_path / "d.sock", handler):
            upstream = await Upstream.connect(tmp_path / "d.sock")
            try:
                await scenario(upstream)
            finally:
                upstream.close()
    asyncio.run(main())


def test_continue_then_answer_then_reuse(tmp_path: Path) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def scenario(upstream: Upstream) -> None:
        assert await events_of(upstream) == [(100, b"Continue"), (200, b"OK"), b"{}"]
        assert upstream.finish_exchange() and upstream.reusable
        assert await events_of(upstream) == [(200, b"OK"), b"{}"]

    run_with(tmp_path, answering(b"HTTP/1.1 100 Continue\r\n\r\n" + ok, ok), scenario)


def test_head_answer_has_no_body_whatever_its_length(tmp_path: Path) -> None:
    async def scenario(upstream: Upstream) -> None:
        assert await events_of(upstream, b"HEAD") == [(200, b"OK")]
        assert upstream.finish_exchange()
        assert await events_of(upstream) == [(204, b"No Content")]

    run_with(tmp_path, answering(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
                                 b"HTTP/1.1 204 No Content\r\n\r\n"), scenario)


def test_body_without_length_runs_to_eof_and_is_not_reused(tmp_path: Path) -> None:
    async def scenario(upstream: Upstream) -> None:
        assert b"".join(e for e in await events_of(upstream) if isinstance(e, bytes)) == b"all of it"
        assert not upstream.finish_exchange()

    run_with(tmp_path, answering(b"HTTP/1.1 200 OK\r\n\r\nall of it", close=True), scenario)


def test_cut_answer_and_garbage_are_broken(tmp_path: Path) -> None:
    async def cut(upstream: Upstream) -> None:
        with pytest.raises(UpstreamBroken, match="before its answer was complete"):
            await events_of(upstream)

    async def garbage(upstream: Upstream) -> None:
        with pytest.raises(UpstreamBroken, match="invalid answer"):
            await events_of(upstream)

    run_with(tmp_path, answering(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", close=True), cut)
    run_with(tmp_path, answering(b"\x00\x01 nonsense\r\n\r\n"), garbage)
