"""The smallest grpcio aio relay: the floor a Python relay cannot go below.

    .venv/bin/python -m bench.aio_relay --listen PATH --backend PATH [--option KEY=INT ...]

One generic handler, one upstream multicallable per method path (cached), raw bytes,
unary-unary only, nothing else: no metadata, deadline or error handling. The benchmark
runs it beside the proxy so that the proxy's own cost shows as the difference.
--option sets a gRPC channel argument on both the server and the upstream channel
(for trying grpcio configurations against this floor).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from runtimeproxy.usage import OneLineParser

MAX_MESSAGE_BYTES = 512 * 1024 * 1024


class Relay(grpc.GenericRpcHandler):
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = self._handlers.get(details.method)
        if handler is None:
            handler = self._handlers[details.method] = grpc.unary_unary_rpc_method_handler(
                forwarder(self._channel.unary_unary(details.method)))
        return handler


def forwarder(upstream: grpc.aio.UnaryUnaryMultiCallable) -> Callable[[bytes, object], Awaitable[bytes]]:
    async def relay(request: bytes, context: object) -> bytes:
        return await upstream(request)
    return relay


def parse_option(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    return key, int(value)


async def serve(listen: Path, backend: Path, extra: list[tuple[str, int]]) -> None:
    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), *extra]
    channel = grpc.aio.insecure_channel(f"unix://{backend}", options=options)
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((Relay(channel),))
    server.add_insecure_port(f"unix://{listen}")
    await server.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(0)
    await channel.close()


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=Path, required=True)
    parser.add_argument("--backend", type=Path, required=True)
    parser.add_argument("--option", type=parse_option, action="append", default=[], metavar="KEY=INT")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.backend, args.option))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
