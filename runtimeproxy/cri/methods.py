"""The CRI method table, read from the compiled protobuf descriptors.

Nothing here is written per method: the kind of every RPC (unary or streaming) comes
from the service descriptors of runtime.v1 and runtime.v1alpha2, so a regenerated
API file is all a new CRI method needs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import ModuleType

from google.protobuf.descriptor import Descriptor, FileDescriptor

from runtimeproxy.pb.cri.runtime.v1 import api_pb2 as cri_v1
from runtimeproxy.pb.cri.runtime.v1alpha2 import api_pb2 as cri_v1alpha2

CRI_API_MODULES: tuple[ModuleType, ...] = (cri_v1, cri_v1alpha2)


class Kind(enum.Enum):
    UNARY_UNARY = "unary-unary"
    UNARY_STREAM = "unary-stream"
    STREAM_UNARY = "stream-unary"
    STREAM_STREAM = "stream-stream"

    @classmethod
    def of(cls, client_streaming: bool, server_streaming: bool) -> Kind:
        return {
            (False, False): cls.UNARY_UNARY,
            (False, True): cls.UNARY_STREAM,
            (True, False): cls.STREAM_UNARY,
            (True, True): cls.STREAM_STREAM,
        }[(client_streaming, server_streaming)]


@dataclass(frozen=True)
class Method:
    """One RPC the proxy serves, addressed by its HTTP/2 path."""

    path: str  # "/runtime.v1.RuntimeService/Version"
    service: str  # "runtime.v1.RuntimeService"
    name: str  # "Version"
    kind: Kind
    # Descriptors are None for methods the proxy has no schema for.
    input_type: Descriptor | None = None
    output_type: Descriptor | None = None

    @property
    def is_image_service(self) -> bool:
        return self.service.endswith(".ImageService")


def split_path(path: str) -> tuple[str, str] | None:
    """("pkg.Service", "Method") for "/pkg.Service/Method"; None if malformed."""
    if not path.startswith("/"):
        return None
    service, sep, name = path[1:].partition("/")
    if not sep or not service or not name or "/" in name:
        return None
    return service, name


def methods_of_file(file: FileDescriptor) -> list[Method]:
    return [
        Method(
            path=f"/{service.full_name}/{rpc.name}",
            service=service.full_name,
            name=rpc.name,
            kind=Kind.of(rpc.client_streaming, rpc.server_streaming),
            input_type=rpc.input_type,
            output_type=rpc.output_type,
        )
        for service in file.services_by_name.values()
        for rpc in service.methods
    ]


def cri_method_table() -> dict[str, Method]:
    """Every RuntimeService and ImageService method of every CRI version we know."""
    return {
        method.path: method
        for module in CRI_API_MODULES
        for method in methods_of_file(module.DESCRIPTOR)
    }


def cri_service_names() -> list[str]:
    return [
        service.full_name
        for module in CRI_API_MODULES
        for service in module.DESCRIPTOR.services_by_name.values()
    ]


def unknown_method(path: str) -> Method | None:
    """A method in no descriptor. Stream-stream framing carries any RPC kind unchanged."""
    parts = split_path(path)
    if parts is None:
        return None
    service, name = parts
    return Method(path=path, service=service, name=name, kind=Kind.STREAM_STREAM)
