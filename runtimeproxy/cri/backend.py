"""Channels to the backend runtime (containerd), tracking of its reachability and a liveness probe.

BackendHealth is the one record of whether each backend is healthy (connected and
answering the probe): the gRPC health service, /readyz, the reachability metric and
`runtimeproxyctl status` all read it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from runtimeproxy.endpoints import grpc_target
from runtimeproxy.cri import probe
from runtimeproxy.cri.limits import metadata_limit_options
from runtimeproxy.cri.methods import Method

log = logging.getLogger(__name__)

ReachabilityListener = Callable[["BackendChannel", bool], Awaitable[None]]
ResponsivenessListener = ReachabilityListener

# The liveness probe. A backend that stops answering (containerd frozen by SIGSTOP, or
# wedged) keeps its connection READY, so connectivity alone cannot tell: while
# connected, a cheap call is made every interval with a short deadline, unless a relayed
# call was answered within the interval (that proves it alive: a busy proxy never probes).
# A probe left unanswered is repeated at once, so a frozen backend is found within
# INTERVAL + 2 * TIMEOUT (5 s). The call is framed by hand on a connection of its own
# (cri.probe): a cold call on the gRPC channel cost ~1.7 ms of CPU, most of an idle proxy's.
PROBE_PATH = "/runtime.v1.RuntimeService/Version"
PROBE_METADATA_KEY = "x-runtimeproxy-probe"  # marks probes, for backends (and tests) that care
PROBE_INTERVAL_SECONDS = 2.5
PROBE_TIMEOUT_SECONDS = 1.25
PROBE_FAILURES_FOR_UNRESPONSIVE = 2  # in a row: one slow answer under load is not an outage
# Any answer counts, whatever its status (even UNIMPLEMENTED): the backend chose it.
_PROBE_REQUEST = probe.probe_request(PROBE_PATH, ((PROBE_METADATA_KEY, "1"),))


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        *metadata_limit_options(),
        # Retry a vanished backend every <=1s (gRPC's default backoff grows to 120s),
        # so a restarted containerd is picked up at once, without a proxy restart.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # Never drop the connection for idleness: health must reflect the backend.
        ("grpc.client_idle_timeout_ms", 2**31 - 1),
        # Proxied calls are forwarded exactly once; the kubelet does its own retries.
        ("grpc.enable_retries", 0),
    ]


class BackendChannel:
    """One long-lived channel to one backend socket; gRPC reconnects it on its own."""

    def __init__(self, role: str, path: Path, max_message_bytes: int) -> None:
        self.role = role
        self.path = path
        self.target = grpc_target(path)
        self.channel = grpc.aio.insecure_channel(self.target, options=channel_options(max_message_bytes))
        self.answered_at = -PROBE_INTERVAL_SECONDS  # monotonic time of the last relayed answer

    def answered(self) -> None:
        """A relayed call got its answer: the backend is alive (the probe can rest)."""
        self.answered_at = time.monotonic()

    def is_ready(self) -> bool:
        return self.channel.get_state(try_to_connect=False) is grpc.ChannelConnectivity.READY

    def unreachable_message(self, details: str) -> str:
        return f"{self.role} backend {self.target} is unreachable: {details}"

    async def watch(self, on_change: ReachabilityListener) -> None:
        """Call on_change(self, reachable) at start and on every settled change; runs until cancelled."""
        reachable: bool | None = None
        state = self.channel.get_state(try_to_connect=True)
        while True:
            settled = _settled_reachability(state)
            if settled is not None and settled != reachable:
                reachable = settled
                if reachable:
                    log.info("%s backend %s is reachable", self.role, self.target)
                else:
                    log.warning("%s backend %s is unreachable; retrying", self.role, self.target)
                await on_change(self, reachable)
            await self.channel.wait_for_state_change(state)
            state = self.channel.get_state(try_to_connect=True)

    async def _probe_fails(self) -> grpc.StatusCode | None:
        """The code of a probe the backend did not answer; None when it answered."""
        try:
            answered = await probe.answers(self.path, _PROBE_REQUEST, PROBE_TIMEOUT_SECONDS)
        except OSError:
            return grpc.StatusCode.UNAVAILABLE
        return None if answered else grpc.StatusCode.DEADLINE_EXCEEDED

    async def probe(self, on_change: ResponsivenessListener) -> None:
        """While connected, probe every interval; on_change(self, responsive) on each change. Runs until cancelled."""
        responsive = True
        failures = 0
        while True:
            # One probe without an answer is checked again at once; otherwise wait the interval.
            await asyncio.sleep(0 if failures == 1 else PROBE_INTERVAL_SECONDS)
            if not self.is_ready():
                failures = 0  # not connected: the reachability watch reports that
                continue
            if responsive and not failures and time.monotonic() - self.answered_at < PROBE_INTERVAL_SECONDS:
                continue  # relayed calls proved it alive
            code = await self._probe_fails()
            failures = failures + 1 if code is not None else 0
            now_responsive = failures < PROBE_FAILURES_FOR_UNRESPONSIVE
            if now_responsive == responsive:
                continue
            responsive = now_responsive
            if responsive:
                log.info("%s backend %s answers again", self.role, self.target)
            else:
                log.warning("%s backend %s is connected but does not answer (%s on %d probes of %.0fs in a row)",
                            self.role, self.target, code.name if code else "?", failures, PROBE_TIMEOUT_SECONDS)
            await on_change(self, responsive)

    async def close(self) -> None:
        await self.channel.close()


def _settled_reachability(state: grpc.ChannelConnectivity) -> bool | None:
    """True/False once a connection attempt has ended; None while it is in progress."""
    if state is grpc.ChannelConnectivity.READY:
        return True
    if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
        return False
    return None


HealthListener = Callable[[BackendChannel], Awaitable[None]]


class BackendHealth:
    """Per backend role: healthy while connected and answering probes; fed by watch() and probe()."""

    def __init__(self) -> None:
        self._reachable: dict[str, bool] = {}
        self._responsive: dict[str, bool] = {}
        self._on_change: HealthListener | None = None

    def healthy(self, channel: BackendChannel) -> bool:
        return self._reachable.get(channel.role, False) and self._responsive.get(channel.role, True)

    def problem(self, channel: BackendChannel) -> str | None:
        """Why the backend is not healthy, in a few words; None when it is."""
        if not self._reachable.get(channel.role, False):
            return "unreachable"
        if not self._responsive.get(channel.role, True):
            return "connected but not answering"
        return None

    def listen(self, on_change: HealthListener) -> None:
        """Have on_change(channel) called after every change (the gRPC health service's publisher)."""
        self._on_change = on_change

    async def on_reachability(self, channel: BackendChannel, reachable: bool) -> None:
        self._reachable[channel.role] = reachable
        await self._changed(channel)

    async def on_responsiveness(self, channel: BackendChannel, responsive: bool) -> None:
        self._responsive[channel.role] = responsive
        await self._changed(channel)

    async def _changed(self, channel: BackendChannel) -> None:
        if self._on_change is not None:
            await self._on_change(channel)


class Backend:
    """The runtime channel and the image channel (the same one unless configured apart)."""

    def __init__(self, runtime_path: Path, image_path: Path, max_message_bytes: int) -> None:
        self.runtime = BackendChannel("runtime", runtime_path, max_message_bytes)
        if image_path == runtime_path:
            self.image = self.runtime
        else:
            self.image = BackendChannel("image", image_path, max_message_bytes)

    @property
    def channels(self) -> list[BackendChannel]:
        return [self.runtime] if self.image is self.runtime else [self.runtime, self.image]

    def for_method(self, method: Method) -> BackendChannel:
        return self.image if method.is_image_service else self.runtime

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
