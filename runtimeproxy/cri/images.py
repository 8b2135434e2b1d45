"""An image's Entrypoint and Cmd as containerd knows them (verbose ImageStatus), for the argv an NRI plugin sees.

Only read when an extra plugin subscribed to CreateContainer and the config has no command (containerd then
runs the image's): one ImageStatus call on the image channel. containerd's verbose info holds the image's
OCI config as JSON (info["info"] -> imageSpec.config). Anything unreadable gives empty lists (the plugin
then sees the argv the request alone says) and a log line: it never fails the create.
"""

from __future__ import annotations

import logging

import grpc
import orjson
from google.protobuf.message import DecodeError

from runtimeproxy.cri.backend import BackendChannel
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

log = logging.getLogger(__name__)

_TIMEOUT = 5.0
_METHODS = ("/runtime.v1.ImageService/ImageStatus", "/runtime.v1alpha2.ImageService/ImageStatus")


class ImageProcess:
    def __init__(self, channel: BackendChannel) -> None:
        self._channel = channel

    async def entrypoint_and_cmd(self, image: str) -> tuple[list[str], list[str]]:
        request = cri.ImageStatusRequest(image=cri.ImageSpec(image=image), verbose=True).SerializeToString()
        for method in _METHODS:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.channel.unary_unary(method)
            try:
                answer = cri.ImageStatusResponse.FromString(await call(request, timeout=_TIMEOUT))
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                    continue
                log.warning("cannot read image %s for an NRI plugin's view of the argv: %s", image, error.details())
                return [], []
            except DecodeError as error:
                log.warning("cannot read image %s: %s", image, error)
                return [], []
            return entrypoint_and_cmd_of(answer, image)
        return [], []


def entrypoint_and_cmd_of(answer: cri.ImageStatusResponse, image: str) -> tuple[list[str], list[str]]:
    try:
        config = orjson.loads(answer.info.get("info", "{}")).get("imageSpec", {}).get("config", {})
        return list(config.get("Entrypoint") or []), list(config.get("Cmd") or [])
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        log.warning("image %s: verbose ImageStatus info not understood", image)
        return [], []
