"""Every forwarding and server test again with the frame relay off (--cri-frame-relay=false): the gRPC server alone
on the public socket, every call through its generic handler."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_forwarding import *  # noqa: F403 - the same guards, through the gRPC server alone (start_proxy below)
from test_server import *  # noqa: F403

from runtimeproxy.app import Proxy

ProxyFactory = Callable[..., Proxy]


@pytest.fixture
def start_proxy(start_proxy: ProxyFactory) -> ProxyFactory:  # the conftest's, with the frame relay off
    def start(**overrides: object) -> Proxy:
        return start_proxy(**{"frame_relay": False, **overrides})

    return start
