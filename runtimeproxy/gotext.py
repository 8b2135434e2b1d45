"""Text as the Go programs around the proxy read it (containerd, dockerd, the kubelet).

Go's `encoding/json` turns each byte that is not part of valid UTF-8 into one U+FFFD, and an escaped UTF-16
surrogate that is not part of a pair into one U+FFFD too. Python's own "replace" decoding folds a broken
sequence into a single U+FFFD, and `json` keeps lone surrogates, which protobuf strings refuse: so the proxy
reads such text with these functions and sees what the runtime will see.
"""

from __future__ import annotations

import codecs
import re

_PER_BYTE = "runtimeproxy.go-per-byte"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_each_byte(error: UnicodeError) -> tuple[str, int]:
    assert isinstance(error, UnicodeDecodeError)
    return "\ufffd" * (error.end - error.start), error.end


codecs.register_error(_PER_BYTE, _replace_each_byte)


def go_text(raw: bytes) -> str:
    """`raw` decoded as UTF-8 with each invalid byte one U+FFFD, as Go's encoding/json writes it."""
    return raw.decode("utf-8", _PER_BYTE)


def without_lone_surrogates(text: str) -> str:
    """`text` with each unpaired surrogate (from a JSON `\\ud800` escape) one U+FFFD, as Go decodes it."""
    return _LONE_SURROGATE.sub("\ufffd", text)
