"""Hooked JSON bodies decoded and encoded off the event loop, on one worker thread.

A hooked body may be up to 16 MiB; decoding or encoding that on the event loop stalls every other
client for a good part of a second. A worker thread alone does not help: the C `json` scanner and
encoder hold the GIL for a whole document, so the loop would still wait for it. So large bodies are
walked by `json`'s own Python scanner and iterating encoder (C still decodes and encodes each string),
which let the GIL go every few milliseconds; small bodies, the normal case, take the C path. One worker:
two threads taking turns with the GIL starve the loop more than one.

Whatever cannot be decoded (not JSON, not UTF-8, nested deeper than the scanner's recursion allows) is a
`BodyError`: the body is not of the shape hooks expect, so it is relayed untouched, as dockerd would
answer it. orjson is not used: 3.8 parses nesting of any depth recursively and crashes the process on
a 2 MB body of brackets, and its encoder refuses depths over 254.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import json.scanner
from collections.abc import Callable
from typing import Any, TypeVar

from runtimeproxy.docker.messages import Body, BodyError

T = TypeVar("T")

# At or below this the C codec's GIL hold is well under a millisecond.
C_CODEC_MAX_BYTES = 64 * 1024

_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="docker-bodies")


def _stepwise_decoder() -> json.JSONDecoder:
    decoder = json.JSONDecoder()
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


_STEPWISE = _stepwise_decoder()
_ENCODER = json.JSONEncoder()


def decode_body(data: bytes) -> Body:
    """The JSON object in `data`; BodyError for anything else."""
    try:
        body = json.loads(data) if len(data) <= C_CODEC_MAX_BYTES else _STEPWISE.decode(data.decode())
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BodyError(f"body is not JSON of a depth hooks read: {type(error).__name__}: {error}") from None
    if not isinstance(body, dict):
        raise BodyError("body is not a JSON object")
    return body


def encode_body(body: Any, size_hint: int) -> bytes:
    """`body` as JSON; `size_hint` (the decoded body's size) picks the codec. BodyError if it cannot be."""
    try:
        if size_hint <= C_CODEC_MAX_BYTES:
            return json.dumps(body).encode()
        return "".join(_ENCODER.iterencode(body)).encode()
    except (ValueError, TypeError, RecursionError) as error:
        raise BodyError(f"body cannot be encoded: {error}") from None


async def parse_body(data: bytes) -> Body:
    """decode_body on the worker thread."""
    return await asyncio.get_running_loop().run_in_executor(_executor, decode_body, data)


async def serialize_body(body: Any, size_hint: int) -> bytes:
    """encode_body on the worker thread."""
    return await asyncio.get_running_loop().run_in_executor(_executor, encode_body, body, size_hint)


async def convert_large(size_hint: int, convert: Callable[..., T], *args: Any) -> T:
    """`convert(*args)` (a body <-> hook request conversion) on the worker thread when the body is large.

    A 16 MiB create's hook request holds ~140,000 labels, put into protobuf maps one by one in Python
    (and read back one by one to rewrite the body): ~100 ms per body, which on the event loop stalled
    every other client; on the worker the GIL goes back to the loop every switch interval."""
    if size_hint <= C_CODEC_MAX_BYTES:
        return convert(*args)
    return await asyncio.get_running_loop().run_in_executor(_executor, convert, *args)
