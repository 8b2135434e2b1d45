"""One registered plugin: its config and the gRPC channel to its endpoint, opened on demand once the
socket's path is trusted (see runtimeproxy.trust), dropped when the plugin is unreachable.
`endpoint_problem` says why calls to an endpoint would fail right now (the registry's log when a file is read,
status, try-plugin)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from runtimeproxy.endpoints import grpc_target, listener_problem
from runtimeproxy.hooks.config import FailurePolicy, PluginConfig
from runtimeproxy.hooks.validate import printable
from runtimeproxy.trust import TrustedOwners

log = logging.getLogger(__name__)

# Calls still running on a channel dropped as unreachable may finish within this.
_DROP_GRACE_SECONDS = 30.0
# An unused plugin connection is released after this; the next call reconnects.
_IDLE_TIMEOUT_MS = 60_000


class PluginCallFailed(Exception):
    """A plugin call that brought no answer: the gRPC code it counts as, and why."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class CallRefused(Exception):
    """A plugin call refused before it is made; it counts as a failed call with this code."""

    code = grpc.StatusCode.UNAVAILABLE


class SocketNotTrusted(CallRefused):
    """The plugin's socket, or a directory or link on its path, could be swapped by an untrusted user."""

    code = grpc.StatusCode.PERMISSION_DENIED


class ChannelClosed(CallRefused):
    """The plugin was unregistered (its channel closed) after the call picked it."""


class PluginChannel:
    """The gRPC channel to one plugin endpoint, opened only when a call needs it.

    An idle registry costs nothing: a channel exists only once a call has used it, and a
    call that finds the plugin unreachable drops it, so a dead plugin is not reconnected in
    the background and a plugin that starts late is connected afresh by the next call.
    Must be used on the event loop thread (aio channels).
    """

    def __init__(self, endpoint: Path, max_message_bytes: int, owners: TrustedOwners) -> None:
        self.endpoint = endpoint
        self._max_message_bytes = max_message_bytes
        self._owners = owners
        self._channel: grpc.aio.Channel | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    @property
    def is_open(self) -> bool:
        """Whether a gRPC channel exists right now (for tests and debugging)."""
        return self._channel is not None

    def open(self) -> grpc.aio.Channel:
        """The channel for one call, once only trusted users can change its socket path; raises CallRefused."""
        if self.closed:
            raise ChannelClosed(f"the channel to {grpc_target(self.endpoint)} is closed: plugin unregistered")
        self._check_socket_path()
        if self._channel is None:
            log.debug("connecting to plugin endpoint %s", grpc_target(self.endpoint))
            self._channel = grpc.aio.insecure_channel(
                grpc_target(self.endpoint), options=plugin_channel_options(self._max_message_bytes)
            )
        return self._channel

    def drop(self, channel: grpc.aio.Channel) -> None:
        """Forget a channel whose plugin was unreachable; calls still on it get a grace period."""
        if channel is not self._channel:
            return  # already dropped by a concurrent call
        self._channel = None
        task = asyncio.get_running_loop().create_task(channel.close(_DROP_GRACE_SECONDS))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self.closed = True
        channel, self._channel = self._channel, None
        try:
            if channel is not None:
                await channel.close()
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
        except Exception:  # noqa: BLE001
            log.exception("closing the channel to plugin endpoint %s failed", grpc_target(self.endpoint))

    def _check_socket_path(self) -> None:
        """Refuse the call unless only trusted users can change what a connect() to the endpoint reaches.

        gRPC connects by path, on its own schedule (the first call, after an idle timeout, after
        the plugin restarted), so checking the socket found now says nothing about the one it will
        connect to. The path walk does (see `trust`): once every directory on the way is one that
        no untrusted user can write, nobody but a trusted user can swap the socket between this check
        and any connect that follows, or create it while it is missing. A channel whose path stops
        being trusted is dropped, so a connection made while it was not is never reused.
        """
        try:
            problem = self._owners.socket_path_problem(self.endpoint)
        except OSError as error:
            self._drop_current()
            raise CallRefused(f"socket {self.endpoint} cannot be reached: {error.strerror or error}") from None
        if problem is not None:
            self._drop_current()
            raise SocketNotTrusted(problem)

    def _drop_current(self) -> None:
        if self._channel is not None:
            self.drop(self._channel)


def endpoint_problem(endpoint: Path, owners: TrustedOwners) -> str:
    """Why every call to the plugin socket `endpoint` would fail now, one line naming the fix, or "": a path
    the proxy refuses to call (runtimeproxy.trust), no socket there, or nobody listening on it (a bare
    connect, closed at once: no call is made)."""
    try:
        untrusted = owners.socket_path_problem(endpoint)
    except OSError as error:
        return f"socket {endpoint} cannot be reached: {error.strerror or error}"
    if untrusted is not None:
        return (f"the proxy refuses every call to this plugin (PERMISSION_DENIED): {untrusted}; serve the socket in a "
                "directory only root can write (e.g. /run/NAME/plugin.sock), owned by root or a uid of the proxy's "
                "--runtime-hook-config-trusted-uids")
    unanswered = listener_problem(endpoint)
    return f"{unanswered}; every call fails until the plugin serves it" if unanswered else ""


def plugin_channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # A connection nobody uses is released; the next call reconnects.
        ("grpc.client_idle_timeout_ms", _IDLE_TIMEOUT_MS),
        ("grpc.enable_retries", 0),
        # Subchannels of its own: with gRPC's process-wide pool, the channel opened after an unreachable plugin's
        # was dropped (still closing, in its grace period) shares its subchannel, in reconnect backoff for a
        # second or more, and fails at once although the plugin now serves.
        ("grpc.use_local_subchannel_pool", 1),
    ]


@dataclass(frozen=True)
class Plugin:
    """A registered plugin: its config and the channel to its endpoint (shared per endpoint)."""

    config: PluginConfig
    channel: PluginChannel

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def endpoint(self) -> Path:
        return self.config.endpoint

    @property
    def failure_policy(self) -> FailurePolicy:
        return self.config.failure_policy

    @property
    def timeout_seconds(self) -> float:
        return self.config.timeout_seconds

    async def call(self, path: str, request: bytes, timeout: float) -> bytes:
        """One call of a hook method (`path`) with raw bytes both ways, within `timeout` seconds.

        Raises PluginCallFailed: refused before it was made (the socket's path is not trusted, the plugin
        was unregistered), an error status, or the channel closed mid-call. An unreachable plugin's channel
        is dropped: no background reconnects, the next call connects afresh.
        """
        try:
            channel = self.channel.open()  # connects on demand, after checking the socket's owner
        except CallRefused as error:
            raise PluginCallFailed(error.code, str(error)) from None
        try:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)  # raw bytes both ways
            answer = await call(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.UNAVAILABLE:
                self.channel.drop(channel)
            raise PluginCallFailed(error.code(), printable(error.details() or "")) from None
        except Exception as error:  # e.g. its channel closed by a config change mid-call
            raise PluginCallFailed(grpc.StatusCode.UNAVAILABLE, repr(error)) from None
        return answer
