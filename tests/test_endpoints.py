from pathlib import Path

import pytest

from runtimeproxy.endpoints import EndpointError, grpc_target, parse_unix_endpoint


@pytest.mark.parametrize(
    "text",
    ["/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock",
     "unix:/run/containerd/containerd.sock", "  /run/containerd/containerd.sock "],
)
def test_accepts_the_spellings_kubelet_and_koordinator_use(text: str) -> None:
    assert parse_unix_endpoint(text) == Path("/run/containerd/containerd.sock")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("tcp://127.0.0.1:1234", "only unix sockets"), ("", "empty"), ("unix://", "empty"),
     ("relative/x.sock", "absolute")],
)
def test_rejects_what_is_not_an_absolute_unix_path(text: str, problem: str) -> None:
    with pytest.raises(EndpointError, match=problem):
        parse_unix_endpoint(text)


def test_grpc_target_is_a_unix_uri() -> None:
    assert grpc_target(Path("/a/b.sock")) == "unix:///a/b.sock"
