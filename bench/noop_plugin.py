"""A no-op hook plugin for the benchmark: every hook answers with an EMPTY response.

An empty response changes nothing under the proxy's merge rules (an empty
ContainerResourceHookResponse has no container_resources, so resources stay as they
are), so what the benchmark measures is the pure cost of the plugin round trips.

    python3 bench/noop_plugin.py --socket /tmp/x/noop.sock --counts /tmp/x/noop-counts.json

It counts the calls per hook in memory and writes them as JSON to --counts on SIGUSR1
(and on exit), so the benchmark can check that the hooks really ran, at no per-call cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable from a checkout

import grpc  # noqa: E402

from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks  # noqa: E402
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2_grpc as hooks_grpc  # noqa: E402

Context = grpc.aio.ServicerContext
PodRequest = hooks.PodSandboxHookRequest
PodResponse = hooks.PodSandboxHookResponse
ContainerRequest = hooks.ContainerResourceHookRequest
ContainerResponse = hooks.ContainerResourceHookResponse


class NoopPlugin(hooks_grpc.RuntimeHookServiceServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def _pod(self, hook: str) -> PodResponse:
        self.calls[hook] += 1
        return PodResponse()

    def _container(self, hook: str) -> ContainerResponse:
        self.calls[hook] += 1
        return ContainerResponse()

    async def PreRunPodSandboxHook(self, request: PodRequest, context: Context) -> PodResponse:
        return self._pod("PreRunPodSandbox")

    async def PostStopPodSandboxHook(self, request: PodRequest, context: Context) -> PodResponse:
        return self._pod("PostStopPodSandbox")

    async def PreCreateContainerHook(self, request: ContainerRequest, context: Context) -> ContainerResponse:
        return self._container("PreCreateContainer")

    async def PreStartContainerHook(self, request: ContainerRequest, context: Context) -> ContainerResponse:
        return self._container("PreStartContainer")

    async def PostStartContainerHook(self, request: ContainerRequest, context: Context) -> ContainerResponse:
        return self._container("PostStartContainer")

    async def PostStopContainerHook(self, request: ContainerRequest, context: Context) -> ContainerResponse:
        return self._container("PostStopContainer")

    async def PreUpdateContainerResourcesHook(self, request: ContainerRequest, context: Context) -> ContainerResponse:
        return self._container("PreUpdateContainerResources")


def write_counts(plugin: NoopPlugin, path: Path | None) -> None:
    if path is not None:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(dict(plugin.calls), sort_keys=True))
        temporary.replace(path)


async def serve(socket_path: Path, counts_path: Path | None) -> None:
    plugin = NoopPlugin()
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.aio.server()
    hooks_grpc.add_RuntimeHookServiceServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, write_counts, plugin, counts_path)
    await stop.wait()
    await server.stop(0)
    write_counts(plugin, counts_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--counts", type=Path, help="write call counts per hook here on SIGUSR1 and on exit")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.socket, args.counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
