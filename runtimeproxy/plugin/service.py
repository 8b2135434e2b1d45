"""The plugin base class: implement only the hooks you want, serve on a unix socket.

`HookPlugin` is a `runtime.v1alpha1.RuntimeHookService` servicer. A subclass defines any of the
snake_case hook methods (`pre_create_container(request)`, sync or async) and returns only what it
changes (plugin.answers): None, a response message holding its changes, or `Whole(response)`. A hook it
does not define answers the echo (no change). A post-hook's return value is ignored (post-hooks change
nothing). An exception fails the call (`HookError` chooses the status code; anything else is INTERNAL), and
the proxy then applies the plugin's failure policy.

`start(socket)` serves on a unix socket: a stale socket file is replaced, a missing directory is created
0755, the socket gets mode 0600 (root's proxy connects whatever the mode; 0660 lets a group in). The proxy
calls a socket only if it is owned by root, the proxy's user or a `--runtime-hook-config-trusted-uids` uid.
"""

from __future__ import annotations

import inspect
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf.message import Message

from runtimeproxy.hooks import dispatcher
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc
from runtimeproxy.plugin.answers import Whole, answer

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600
SOCKET_DIR_MODE = 0o755
Context = grpc.aio.ServicerContext
PodAnswer = hooks.PodSandboxHookResponse | Whole[hooks.PodSandboxHookResponse] | None
ContainerAnswer = hooks.ContainerResourceHookResponse | Whole[hooks.ContainerResourceHookResponse] | None


@dataclass(frozen=True)
class Hook:
    name: str  # as in registrations: "PreCreateContainer"
    method: str  # the HookPlugin method: "pre_create_container"
    rpc: str  # the gRPC method: "PreCreateContainerHook"
    request_type: type[Message]
    response_type: type[Message]
    is_pre: bool


def _hook(point: dispatcher.HookPoint) -> Hook:
    method = "".join(f"_{c.lower()}" if c.isupper() else c for c in point.name).lstrip("_")
    return Hook(point.name, method, f"{point.name}Hook", point.request_type, point.response_type, point.is_pre)


HOOKS: tuple[Hook, ...] = tuple(_hook(point) for point in (
    dispatcher.PRE_RUN_POD_SANDBOX, dispatcher.PRE_CREATE_CONTAINER, dispatcher.PRE_START_CONTAINER,
    dispatcher.POST_START_CONTAINER, dispatcher.PRE_UPDATE_CONTAINER_RESOURCES, dispatcher.POST_STOP_CONTAINER,
    dispatcher.POST_STOP_POD_SANDBOX,
))
HOOKS_BY_NAME = {hook.name: hook for hook in HOOKS}


class HookError(Exception):
    """Raise from a hook to fail the call with this status (the proxy applies the failure policy)."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION) -> None:
        super().__init__(message)
        self.code = code


def _rpc(hook: Hook):
    async def call(self: HookPlugin, request: Message, context: Context) -> Message:
        return await self.handle(hook, request, context)

    call.__name__ = hook.rpc
    return call


class HookPlugin(hooks_grpc.RuntimeHookServiceServicer):
    """Subclass and define the hooks you want; each returns only what it changes (or None)."""

    # -- the hooks: define any of these in a subclass --------------------------------------------

    def pre_run_pod_sandbox(self, request: hooks.PodSandboxHookRequest) -> PodAnswer:
        return None

    def pre_create_container(self, request: hooks.ContainerResourceHookRequest) -> ContainerAnswer:
        return None

    def pre_start_container(self, request: hooks.ContainerResourceHookRequest) -> ContainerAnswer:
        return None

    def post_start_container(self, request: hooks.ContainerResourceHookRequest) -> None:
        return None

    def pre_update_container_resources(self, request: hooks.ContainerResourceHookRequest) -> ContainerAnswer:
        return None

    def post_stop_container(self, request: hooks.ContainerResourceHookRequest) -> None:
        return None

    def post_stop_pod_sandbox(self, request: hooks.PodSandboxHookRequest) -> None:
        return None

    @classmethod
    def implemented_hooks(cls) -> list[str]:
        """The hooks this class defines, as registration names (what to list in `runtime-hooks`)."""
        return [hook.name for hook in HOOKS if getattr(cls, hook.method) is not getattr(HookPlugin, hook.method)]

    # -- the protocol ---------------------------------------------------------------------------

    PreRunPodSandboxHook = _rpc(HOOKS_BY_NAME["PreRunPodSandbox"])
    PreCreateContainerHook = _rpc(HOOKS_BY_NAME["PreCreateContainer"])
    PreStartContainerHook = _rpc(HOOKS_BY_NAME["PreStartContainer"])
    PostStartContainerHook = _rpc(HOOKS_BY_NAME["PostStartContainer"])
    PreUpdateContainerResourcesHook = _rpc(HOOKS_BY_NAME["PreUpdateContainerResources"])
    PostStopContainerHook = _rpc(HOOKS_BY_NAME["PostStopContainer"])
    PostStopPodSandboxHook = _rpc(HOOKS_BY_NAME["PostStopPodSandbox"])

    async def handle(self, hook: Hook, request: Message, context: Context) -> Message:
        """Run the hook method and build the answer the proxy expects (a subclass may wrap this)."""
        try:
            result = getattr(self, hook.method)(request)
            if inspect.isawaitable(result):
                result = await result
            if not hook.is_pre:
                return hook.response_type()
            return answer(request, result, hook.response_type)
        except HookError as error:
            await context.abort(error.code, f"{hook.name}: {error}")
        except Exception as error:
            log.exception("%s failed", hook.name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{hook.name}: {error!r}")
        raise AssertionError("unreachable")  # context.abort raises

    # -- serving --------------------------------------------------------------------------------

    _server: grpc.aio.Server | None = None

    async def start(self, socket_path: Path, mode: int = SOCKET_MODE) -> None:
        """Serve on `socket_path` (a stale socket there is replaced) with the given permissions."""
        prepare_socket_path(socket_path)
        server = grpc.aio.server()
        hooks_grpc.add_RuntimeHookServiceServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{socket_path}")  # binds now: restrict it before serving
        os.chmod(socket_path, mode)
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None


def prepare_socket_path(socket_path: Path) -> None:
    """Create the socket's directory (0755) if missing; remove a stale socket, refuse any other file."""
    socket_path.parent.mkdir(mode=SOCKET_DIR_MODE, parents=True, exist_ok=True)
    try:
        status = socket_path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(status.st_mode):
        raise FileExistsError(f"{socket_path} exists and is not a socket")
    socket_path.unlink()
