"""NRI's events as the host sends them: each event's number on the wire.

The core names the events (hooks.extra); this table maps them to NRI's enums (nri.session subscribes by them).
"""

from __future__ import annotations

from runtimeproxy.hooks import extra
from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

EVENTS: dict[str, nri.Event] = {
    extra.RUN_POD_SANDBOX: nri.RUN_POD_SANDBOX,
    extra.STOP_POD_SANDBOX: nri.STOP_POD_SANDBOX,
    extra.REMOVE_POD_SANDBOX: nri.REMOVE_POD_SANDBOX,
    extra.CREATE_CONTAINER: nri.CREATE_CONTAINER,
    extra.POST_CREATE_CONTAINER: nri.POST_CREATE_CONTAINER,
    extra.START_CONTAINER: nri.START_CONTAINER,
    extra.POST_START_CONTAINER: nri.POST_START_CONTAINER,
    extra.UPDATE_CONTAINER: nri.UPDATE_CONTAINER,
    extra.POST_UPDATE_CONTAINER: nri.POST_UPDATE_CONTAINER,
    extra.STOP_CONTAINER: nri.STOP_CONTAINER,
    extra.REMOVE_CONTAINER: nri.REMOVE_CONTAINER,
}
