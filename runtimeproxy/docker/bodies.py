"""Hooked JSON bodies decoded and encoded off the event loop, on one worker thread.

A hooked body may be up to 16 MiB; decoding or encoding that on the event loop stalls every other
client for a good part of a second. A worker thread alone does not help: the C `json` scanner and
encoder hold the GIL for a whole document, so the loop would still wait for it. So large bodies are
walked by `json`'s own Python scanner and iterating encoder (C still decodes and encodes each string),
which let the GIL go every few milliseconds; small bodies, the normal case, take the C path. One worker:
two threads taking turns with the GIL starve the loop more than one.

Bytes that are not UTF-8 and escaped lone surrogates are read as dockerd's Go decoder reads them (one U+FFFD
each, runtimeproxy.gotext): dockerd accepts such a body, so it must reach the hooks, not slip past them.
Whatever cannot be decoded (not JSON, nested deeper than the scanner's recursion allows) is a `BodyError`:
the body is not of the shape hooks expect, so it is relayed untouched, as dockerd would answer it. orjson is
not used: 3.8 parses nesting of any depth recursively and crashes the process on a 2 MB body of brackets,
and its encoder refuses depths over 254.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import json.scanner
import re
from collections.abc import Callable
from typing import Any, TypeVar

from runtimeproxy.docker.messages import Body, BodyError
from runtimeproxy.gotext import go_text, without_lone_surrogates

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
# A \uD800-\uDFFF escape: only then can the decoded body hold a lone surrogate.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def decode_body(data: bytes) -> Body:
    """The JSON object in `data`; BodyError for anything else."""
    text = go_text(data)
    try:
        body = json.loads(text) if len(data) <= C_CODEC_MAX_BYTES else _STEPWISE.decode(text)
        if _ESCAPED_SURROGATE.search(text):
            body = _paired_surrogates_only(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
        raise BodyError(f"body is not JSON of a depth hooks read: {type(error).__name__}: {error}") from None
    if not isinstance(body, dict):
        raise BodyError("body is not a JSON object")
    return body


def _paired_surrogates_only(value: Any) -> Any:
    """`value` with every string's lone surrogates replaced (json pairs valid escapes into one character)."""
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, dict):
        return {without_lone_surrogates(key): _paired_surrogates_only(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_paired_surrogates_only(item) for item in value]
    return value


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
