"""How a Fail-policy hook failure reads to the kubelet: the plugin's status code and message, plus a
google.rpc.Status carrying an ErrorInfo (plugin, hook, endpoint, code, offending field) in the
`grpc-status-details-bin` trailer. CRI-only: Docker mode answers a 500 with the message instead.
"""

from __future__ import annotations

from google.rpc import error_details_pb2, status_pb2

from runtimeproxy.hooks.dispatcher import HookFailed

ERROR_DOMAIN = "runtimeproxy.koordinator.sh"
ERROR_REASON = "RUNTIME_HOOK_FAILED"
STATUS_DETAILS_KEY = "grpc-status-details-bin"


def error_info(failure: HookFailed) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo(
        reason=ERROR_REASON,
        domain=ERROR_DOMAIN,
        metadata={
            "plugin": failure.plugin.name,
            "hook": failure.point.name,
            "endpoint": f"unix://{failure.plugin.endpoint}",
            "plugin-code": failure.code.name,
        },
    )
    if failure.field:
        info.metadata["field"] = failure.field
    return info


def trailing_metadata(failure: HookFailed) -> tuple[tuple[str, bytes], ...]:
    """grpc-status-details-bin: a google.rpc.Status carrying the failure's ErrorInfo."""
    status = status_pb2.Status(code=failure.code.value[0], message=str(failure))
    status.details.add().Pack(error_info(failure))
    return ((STATUS_DETAILS_KEY, status.SerializeToString()),)
