"""hooks.syncgate: lifecycle calls share the gate, a plugin's synchronization has it alone, and waits for no
stream of calls forever."""

from __future__ import annotations

import asyncio

from runtimeproxy.hooks.syncgate import SyncGate


def run(coroutine: object) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 10))  # type: ignore[arg-type]


def test_calls_go_together_and_a_synchronization_waits_for_them_to_leave() -> None:
    async def scenario() -> list[str]:
        gate, seen = SyncGate(), []
        release = asyncio.Event()

        async def call(name: str) -> None:
            async with gate.changing():
                seen.append(f"{name} in")
                await release.wait()
                seen.append(f"{name} out")

        async def sync() -> None:
            async with gate.synchronizing():
                seen.append("sync")

        calls = [asyncio.create_task(call(name)) for name in ("a", "b")]
        await asyncio.sleep(0)
        syncing = asyncio.create_task(sync())
        await asyncio.sleep(0.01)
        assert gate.calls_inside == 2 and "sync" not in seen
        release.set()
        await asyncio.gather(*calls, syncing)
        return seen

    seen = run(scenario())
    assert seen[:2] == ["a in", "b in"] and seen[-1] == "sync"


def test_a_call_arriving_while_a_synchronization_waits_goes_after_it() -> None:
    async def scenario() -> list[str]:
        gate, seen = SyncGate(), []
        first_out = asyncio.Event()

        async def first() -> None:
            async with gate.changing():
                await first_out.wait()

        async def sync() -> None:
            async with gate.synchronizing():
                seen.append("sync")

        async def later() -> None:
            async with gate.changing():
                seen.append("later call")

        holder = asyncio.create_task(first())
        await asyncio.sleep(0)
        syncing = asyncio.create_task(sync())
        await asyncio.sleep(0)
        late = asyncio.create_task(later())
        await asyncio.sleep(0.01)
        assert seen == []  # the sync waits for the first call; the later call waits for the sync
        first_out.set()
        await asyncio.gather(holder, syncing, late)
        return seen

    assert run(scenario()) == ["sync", "later call"]


def test_synchronizations_go_one_at_a_time() -> None:
    async def scenario() -> int:
        gate, inside, most = SyncGate(), 0, 0

        async def sync() -> None:
            nonlocal inside, most
            async with gate.synchronizing():
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.01)
                inside -= 1

        await asyncio.gather(*(sync() for _ in range(5)))
        return most

    assert run(scenario()) == 1
