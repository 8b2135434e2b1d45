"""gRPC limits the proxy sets on its server and its backend channels (metadata, bursts of calls)."""

from __future__ import annotations

# Request and response metadata (headers + trailers) up to what containerd accepts (Go
# gRPC's default header list limit); gRPC's own default refuses anything over 8 KiB.
MAX_METADATA_BYTES = 16 * 1024 * 1024
_UNBOUNDED = 2**31 - 1


def metadata_limit_options() -> list[tuple[str, int]]:
    """gRPC channel/server arguments that lift the metadata limits (soft and hard) to MAX_METADATA_BYTES."""
    return [
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
    ]


def burst_options() -> list[tuple[str, int]]:
    """Server arguments that let a burst of calls queue until served instead of being dropped.

    gRPC core keeps calls that have arrived but not yet been picked up by the (one)
    asyncio serving loop in a pending queue, and beyond 1,000 of them (at random) or
    3,000 (always) ends new ones with a bare CANCELLED: a burst of 2,000 kubelet calls
    lost up to a third. The queue is left unbounded here; the server's concurrency
    limit (ProxyOptions.max_concurrent_calls) is the one bound, and it answers RESOURCE_EXHAUSTED.
    """
    return [
        ("grpc.server.max_pending_requests", _UNBOUNDED),
        ("grpc.server.max_pending_requests_hard_limit", _UNBOUNDED),
    ]
