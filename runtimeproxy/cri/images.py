"""An image as containerd knows it (verbose ImageStatus): its Entrypoint and Cmd, for the argv an NRI plugin sees,
and its identity, NRI's Container.image.

Only read while an NRI plugin is attached (hooks.lifecycle.HookPoints.edits_want_image): one ImageStatus call on the
image channel.
containerd's verbose info holds the image's OCI config as JSON (info["info"] -> imageSpec.config). The identity is
what containerd 2.2+'s own NRI shows (its container metadata's ImageName, ImageDigest, ImageRef), read from the CRI
image: the name its first repo tag (else its first repo digest), the digest that of its first repo digest (an image
never pulled, imported, has none: empty, where containerd's own NRI gives the record's target digest), the config
digest its ID. Anything unreadable gives empty facts (the plugin then sees the argv the request alone says) and a
log line: it never fails the create.
"""

from __future__ import annotations

import logging

import grpc
import orjson
from google.protobuf.message import DecodeError

from runtimeproxy.cri.backend import BackendChannel
from runtimeproxy.hooks.edits import ImageFacts, ImageIdentity
from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri

log = logging.getLogger(__name__)

_TIMEOUT = 5.0
_METHODS = ("/runtime.v1.ImageService/ImageStatus", "/runtime.v1alpha2.ImageService/ImageStatus")


class ImageProcess:
    def __init__(self, channel: BackendChannel) -> None:
        self._channel = channel

    async def facts(self, image: str) -> ImageFacts:
        request = cri.ImageStatusRequest(image=cri.ImageSpec(image=image), verbose=True).SerializeToString()
        for method in _METHODS:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self._channel.channel.unary_unary(method)
            try:
                answer = cri.ImageStatusResponse.FromString(await call(request, timeout=_TIMEOUT))
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                    continue
                log.warning("cannot read image %s for an NRI plugin's view: %s", image, error.details())
                return ImageFacts()
            except DecodeError as error:
                log.warning("cannot read image %s: %s", image, error)
                return ImageFacts()
            entrypoint, cmd = entrypoint_and_cmd_of(answer, image)
            return ImageFacts(tuple(entrypoint), tuple(cmd), identity_of(answer.image))
        return ImageFacts()


def identity_of(image: cri.Image) -> ImageIdentity | None:
    """The CRI image as NRI's Container.image names it; None for an image the runtime does not have."""
    if not image.id:
        return None
    digests = list(image.repo_digests)
    name = image.repo_tags[0] if image.repo_tags else (digests[0] if digests else "")
    return ImageIdentity(name, digests[0].rpartition("@")[2] if digests else "", image.id)


def entrypoint_and_cmd_of(answer: cri.ImageStatusResponse, image: str) -> tuple[list[str], list[str]]:
    try:
        config = orjson.loads(answer.info.get("info", "{}")).get("imageSpec", {}).get("config", {})
        return list(config.get("Entrypoint") or []), list(config.get("Cmd") or [])
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        log.warning("image %s: verbose ImageStatus info not understood", image)
        return [], []
