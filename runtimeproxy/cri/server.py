"""The CRI frontend's server: one generic handler for every CRI method, plus health and reflection.

Serves on a socket runtimeproxy.app has claimed; the process around it (socket lock, hook service, admin,
metrics, signals) is app's.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtimeproxy.cri.backend import Backend, BackendChannel, BackendHealth
from runtimeproxy.cri.calls import CriCallRecorder
from runtimeproxy.listener import SOCKET_MODE
from runtimeproxy.cri.forwarding import UnaryHook, decoding_handler, method_handler
from runtimeproxy.cri.hooks import CriHooks
from runtimeproxy.cri.seccomp import SUBDIRECTORY as SECCOMP_SUBDIRECTORY
from runtimeproxy.cri.runtime import CriRuntime
from runtimeproxy.cri.report import CriReport
from runtimeproxy.greeting import Greeting
from runtimeproxy.hooks.service import HookService
from runtimeproxy.cri.limits import burst_options, metadata_limit_options
from runtimeproxy.cri.methods import Method, cri_method_table, cri_service_names, unknown_method
from runtimeproxy.options import ProxyOptions
from runtimeproxy.relay import FrontFactory, GrpcListenSocket
from runtimeproxy.cri.framefront import FrameRelay
from runtimeproxy.cri.framerelay import Limits
from runtimeproxy.cri.routes import relayed_routes

log = logging.getLogger(__name__)

# Served by the proxy itself, never forwarded.
_OWN_SERVICE_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
# Handlers built for methods in no descriptor are cached up to this many paths.
_MAX_CACHED_UNKNOWN = 256
_OVERALL = ""  # the health service's name for the server as a whole


class CriProxyHandler(grpc.GenericRpcHandler):
    """Finds the prebuilt raw-bytes handler for a method path; unknown paths are forwarded too."""

    def __init__(
        self,
        backend: Backend,
        table: Mapping[str, Method],
        hooks: Mapping[str, UnaryHook],
        decode_all: bool = False,
        recorder: CriCallRecorder | None = None,
    ) -> None:
        self._backend = backend
        self._handlers = {
            path: _build_handler(method, backend.for_method(method), hooks.get(path), decode_all)
            for path, method in table.items()
        }
        self._unknown: dict[str, grpc.RpcMethodHandler] = {}
        self.calls_started = 0  # read by the idle trimmer
        self._recorder = recorder  # metrics on: every call is counted
        if recorder is not None:
            self._handlers = {path: recorder.wrap(table[path], h) for path, h in self._handlers.items()}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        self.calls_started += 1
        path = handler_call_details.method
        handler = self._handlers.get(path)
        if handler is None:
            handler = self._unknown.get(path) or self._handler_for_unknown(path)
        return handler

    def _handler_for_unknown(self, path: str) -> grpc.RpcMethodHandler | None:
        if path.startswith(_OWN_SERVICE_PREFIXES):
            return None
        method = unknown_method(path)
        if method is None:
            return None  # gRPC answers UNIMPLEMENTED
        handler = method_handler(method, self._backend.for_method(method))
        if self._recorder is not None:
            handler = self._recorder.wrap(method, handler, known=False)
        if len(self._unknown) < _MAX_CACHED_UNKNOWN:
            log.info("forwarding %s, which no known CRI version describes, as a stream", path)
            self._unknown[path] = handler
        return handler


def _build_handler(
    method: Method, backend: BackendChannel, hook: UnaryHook | None, decode_all: bool
) -> grpc.RpcMethodHandler:
    if decode_all and hook is None:
        return decoding_handler(method, backend)
    return method_handler(method, backend, hook)


def server_options(max_request_bytes: int, max_response_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_response_bytes),
        ("grpc.max_receive_message_length", max_request_bytes),
        *metadata_limit_options(),
        *burst_options(),
    ]


class HealthReporter:
    """Publishes BackendHealth to the gRPC health service: per CRI service, and overall under ""."""

    def __init__(self, servicer: health.aio.HealthServicer, backend: Backend, state: BackendHealth) -> None:
        self._servicer = servicer
        self._backend = backend
        self._state = state

    def _services_behind(self, channel: BackendChannel) -> list[str]:
        names = cri_service_names()
        if self._backend.image is self._backend.runtime:
            return names
        is_image = channel is self._backend.image
        return [name for name in names if name.endswith(".ImageService") == is_image]

    async def set_all_not_serving(self) -> None:
        for name in [_OVERALL, *cri_service_names()]:
            await self._servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def publish(self, channel: BackendChannel) -> None:
        status = _serving(self._state.healthy(channel))
        for name in self._services_behind(channel):
            await self._servicer.set(name, status)
        healthy = all(self._state.healthy(each) for each in self._backend.channels)
        await self._servicer.set(_OVERALL, _serving(healthy))


def _serving(ok: bool) -> int:
    return health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING




class CriFrontend:
    """CRI mode's server: the gRPC server on the proxy socket (claimed by runtimeproxy.app), the backend
    channels and their health; the hooked calls (cri.hooks) run on the hook service it is given, which
    rebuilds the store and carries out plugins' updates and evictions through its runtime (cri.runtime). Its
    frame relay takes over the connections `greeting` held on the socket systemd passed (runtimeproxy.greeting)."""

    def __init__(self, options: ProxyOptions, hook_service: HookService, greeting: Greeting | None = None) -> None:
        self.options = options
        self._greeting = greeting
        self.backend = Backend(options.runtime_path, options.effective_image_path, options.max_message_bytes)
        self._hook_service = hook_service
        self._health = health.aio.HealthServicer()
        self._backend_health = BackendHealth()
        self.report = CriReport(self.backend, self._backend_health,
                                CriCallRecorder() if options.metrics_address else None)
        self._server: grpc.aio.Server | None = None
        self._listen: GrpcListenSocket | None = None
        self._handler: CriProxyHandler | None = None
        self._front: FrameRelay | None = None
        self._watchers: list[asyncio.Task[None]] = []

    @property
    def calls_started(self) -> int:
        """Read by the idle trimmer."""
        relayed = self._front.calls_started if self._front is not None else 0
        return relayed + (self._handler.calls_started if self._handler is not None else 0)

    def _frame_relay_factory(self, hooked: set[str]) -> FrontFactory:
        options = self.options
        router = relayed_routes(self.backend, cri_method_table(), hooked, self.report.calls)
        limits = Limits(options.max_request_bytes, options.max_message_bytes, options.max_concurrent_calls)

        def make(listening: socket.socket, private: Path) -> FrameRelay:
            self._front = FrameRelay(listening, private, router, limits, self.backend.runtime.path, self._greeting)
            return self._front

        return make

    def describe(self) -> str:
        return (f"listening on {self.options.listen_path}; runtime backend {self.backend.runtime.target}; "
                f"image backend {self.backend.image.target}")

    async def start(self, inherited: socket.socket | None = None) -> None:
        """Serve on options.listen_path (claimed by app), or on the socket systemd passed for it."""
        options, hook_service = self.options, self._hook_service
        profile_dir = options.state_dir / SECCOMP_SUBDIRECTORY if options.state_dir is not None else None
        cri_hooks = CriHooks(hook_service, CriRuntime(self.backend), profile_dir)
        hook_service.start_rebuild()
        server = grpc.aio.server(
            options=server_options(options.max_request_bytes, options.max_message_bytes),
            maximum_concurrent_rpcs=options.max_concurrent_calls,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            [*cri_service_names(), health.SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        # Registered last: the own services above are matched first.
        self._handler = CriProxyHandler(
            self.backend, cri_method_table(), cri_hooks.interceptors(), options.decode_all, self.report.calls,
        )
        server.add_generic_rpc_handlers((self._handler,))
        front = None
        if options.uses_frame_relay:
            front = self._frame_relay_factory(set(cri_hooks.interceptors()))
        self._listen = GrpcListenSocket(options.listen_path, SOCKET_MODE, inherited, front)
        self._listen.bind(server)
        await server.start()
        self._server = server
        await self._listen.start()

        reporter = HealthReporter(self._health, self.backend, self._backend_health)
        await reporter.set_all_not_serving()
        self._backend_health.listen(reporter.publish)
        self._watchers = [
            task
            for channel in self.backend.channels
            for task in (
                asyncio.create_task(channel.watch(self._backend_health.on_reachability), name=f"watch-{channel.role}"),
                asyncio.create_task(channel.probe(self._backend_health.on_responsiveness), name=f"probe-{channel.role}"),
            )
        ]

    async def stop(self, grace: float) -> None:
        """Stop accepting and give in-flight calls `grace` seconds."""
        if self._listen is not None:
            await self._listen.stop_accepting()
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(grace)
            self._server = None
        if self._listen is not None:
            await self._listen.drain()
            self._listen.release()
            self._listen = None
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []

    async def close(self) -> None:
        """Close the backend channels (after the hook service stopped: its store rebuild uses them)."""
        await self.backend.close()
