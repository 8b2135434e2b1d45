"""The CRI proxy server: one generic handler for every CRI method, plus health and reflection."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtimeproxy.allocator import IdleTrimmer
from runtimeproxy.admin.cri_calls import CriCallRecorder
from runtimeproxy.admin.operator import OperatorEndpoints
from runtimeproxy.admin.status import ProxyParts
from runtimeproxy.cri.backend import Backend, BackendChannel, BackendHealth
from runtimeproxy.endpoints import grpc_target
from runtimeproxy.cri.forwarding import UnaryHook, decoding_handler, method_handler
from runtimeproxy.cri.points import RuntimeHooks
from runtimeproxy.cri.recovery import BackendRecords
from runtimeproxy.hooks.service import HookService
from runtimeproxy.cri.limits import burst_options, metadata_limit_options
from runtimeproxy.lifecycle import run_until_signalled
from runtimeproxy.listener import SocketLock, claim_socket_path, release_socket, restrict_socket
from runtimeproxy.cri.methods import Method, cri_method_table, cri_service_names, unknown_method
from runtimeproxy.options import ProxyOptions

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


class ProxyServer:
    """Owns the listening socket, the backend channels and the gRPC server."""

    def __init__(self, options: ProxyOptions) -> None:
        self.options = options
        self.backend: Backend | None = None
        self.hook_service: HookService | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._socket_inode: int | None = None
        self._socket_lock: SocketLock | None = None
        self._watchers: list[asyncio.Task[None]] = []
        self.operator: OperatorEndpoints | None = None

    async def start(self) -> None:
        options = self.options
        started = time.monotonic()
        self._socket_lock = claim_socket_path(options.listen_path)
        self.backend = Backend(
            options.runtime_path, options.effective_image_path, options.max_message_bytes
        )
        self.hook_service = HookService(options)
        await self.hook_service.start()
        records = BackendRecords(self.backend.runtime)
        cri_hooks = RuntimeHooks(self.hook_service, records)
        self.hook_service.run_in_background(cri_hooks.points.rebuild_store(records), "store-rebuild")
        backend_health = BackendHealth()
        parts = ProxyParts(self.backend, self.hook_service, started, backend_health,
                           CriCallRecorder() if options.metrics_address else None, options=options)
        server = grpc.aio.server(
            options=server_options(options.max_request_bytes, options.max_message_bytes),
            maximum_concurrent_rpcs=options.max_concurrent_calls,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            [*cri_service_names(), health.SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        # Registered last: the own services above are matched first.
        handler = CriProxyHandler(
            self.backend, cri_method_table(), cri_hooks.interceptors(), options.decode_all,
            parts.cri_calls,
        )
        server.add_generic_rpc_handlers((handler,))
        if not server.add_insecure_port(grpc_target(options.listen_path)):
            raise RuntimeError(f"cannot listen on {options.listen_path}")
        await server.start()
        self._server = server
        self._socket_inode = restrict_socket(options.listen_path)
        self.operator = OperatorEndpoints(options, parts)
        await self.operator.start()

        reporter = HealthReporter(self._health, self.backend, backend_health)
        await reporter.set_all_not_serving()
        backend_health.listen(reporter.publish)
        self._watchers = [
            task
            for channel in self.backend.channels
            for task in (
                asyncio.create_task(channel.watch(backend_health.on_reachability), name=f"watch-{channel.role}"),
                asyncio.create_task(channel.probe(backend_health.on_responsiveness), name=f"probe-{channel.role}"),
            )
        ]
        trimmer = IdleTrimmer(lambda: handler.calls_started)
        self._watchers.append(asyncio.create_task(trimmer.run(), name="idle-trimmer"))
        log.info(
            "listening on %s; runtime backend %s; image backend %s; plugin configs in %s (%d plugins)%s",
            options.listen_path,
            self.backend.runtime.target,
            self.backend.image.target,
            options.hook_config_dir,
            len(self.hook_service.registry.plugins),
            self.operator.summary(),
        )

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, give in-flight calls `grace` seconds, then release everything."""
        grace = self.options.shutdown_grace_seconds if grace is None else grace
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(grace)
            self._server = None
        if self.operator is not None:
            await self.operator.stop()
            self.operator = None
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []
        if self._socket_lock is not None:  # only a socket we claimed is ours to remove
            release_socket(self.options.listen_path, self._socket_inode)
            self._socket_inode = None
            self._socket_lock.release()
            self._socket_lock = None
        if self.hook_service is not None:
            await self.hook_service.stop()
            self.hook_service = None
        if self.backend is not None:
            await self.backend.close()
            self.backend = None


async def serve(options: ProxyOptions) -> None:
    """Run the proxy until SIGTERM or SIGINT, then shut down gracefully."""
    await run_until_signalled(ProxyServer(options), options.shutdown_grace_seconds)
