"""The seam where hooks enter the Docker relay: a rewrite before, a notification after.

For a hooked route (`routes.HookedRoute`) the relay reads the whole (small) JSON request body, asks the
interceptor's `before` for the body to send (or an error to answer instead, without reaching dockerd),
forwards it, reads dockerd's whole answer and calls `after` before the client gets it. `after` leaves the
answer as it is, or returns an error to answer instead (an NRI plugin failed RunPodSandbox after dockerd
created the sandbox, which `after` removed). `PassThrough` is the no-op interceptor; `docker.hooks.DockerHooks` runs the plugins.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtimeproxy.docker.routes import RouteMatch

# Hooked request and response bodies are JSON of a few KB; above this the relay answers 413.
MAX_HOOKED_BODY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class InterceptedCall:
    """One request on a hooked route, as the client sent it."""

    match: RouteMatch
    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    # What `before` leaves for `after` of the same exchange (e.g. the hook request of a create).
    notes: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class ErrorReply:
    """Answer the client with this status and a Docker error body instead of forwarding."""

    status: int
    message: str


@dataclass(frozen=True)
class UpstreamAnswer:
    """dockerd's complete answer to a hooked request."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class Interceptor(Protocol):
    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        """The request body to forward (the same bytes, or rewritten), or an error to answer."""

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        """Called with dockerd's answer before the client receives it; must not raise. None: the client gets
        dockerd's answer; an ErrorReply: the client gets that instead."""

    def changing(self) -> AbstractAsyncContextManager[None]:
        """Held from before() to after(): the whole exchange is one change for the plugins' synchronization."""


class PassThrough:
    """Forwards every hooked request unchanged and does nothing afterwards."""

    async def before(self, call: InterceptedCall, body: bytes) -> bytes | ErrorReply:
        return body

    async def after(self, call: InterceptedCall, answer: UpstreamAnswer) -> ErrorReply | None:
        return None

    def changing(self) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()
