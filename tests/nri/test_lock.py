"""The host's lock: one holder at a time, and a holder asking again is a bug raised at once."""

from __future__ import annotations

import asyncio

import pytest

from runtimeproxy.nri.lock import EventLock


def test_a_holder_asking_again_raises_instead_of_waiting_for_itself() -> None:
    async def scenario() -> None:
        lock = EventLock()
        async with lock.held():
            with pytest.raises(RuntimeError, match="asked for again"):
                async with lock.held():
                    pass
        assert not lock.locked()
    asyncio.run(scenario())


def test_other_tasks_wait_their_turn() -> None:
    order: list[str] = []

    async def holder(lock: EventLock, name: str) -> None:
        async with lock.held():
            order.append(f"{name} in")
            await asyncio.sleep(0.001)
            order.append(f"{name} out")

    async def scenario() -> None:
        lock = EventLock()
        await asyncio.gather(holder(lock, "a"), holder(lock, "b"))
    asyncio.run(scenario())
    assert order == ["a in", "a out", "b in", "b out"]
