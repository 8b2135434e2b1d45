"""Environment values as the kubelet sends them (bytes) and as plugins see them (text).

Kubelets on cri-api v0.34.9 / v0.35.6 / v0.36.2 and later send `KeyValue.value` as bytes, and put a Secret's data
there as it is, so a value need not be UTF-8. Both plugin protocols carry env values as protobuf strings
(koordinator's `container_envs`, NRI's `env`), which must be UTF-8. The rule:

- a plugin is shown the value as the container will see it: containerd writes the OCI spec as JSON, which turns
  each byte that is not UTF-8 into one U+FFFD, and so does this decoding (runtimeproxy.gotext);
- a value a plugin left as it was shown is written back as the kubelet's original bytes, so echoing the env
  corrupts nothing; a value it changed is written as the plugin's text (UTF-8); a name it removed is removed.

The runtime therefore receives exactly what the kubelet sent for every entry no plugin changed.
"""

from __future__ import annotations

from runtimeproxy.gotext import go_text


def shown_value(raw: bytes) -> str:
    """The text a plugin sees for an env value: invalid UTF-8 replaced by U+FFFD, as the container sees it."""
    return go_text(raw)


def written_value(text: str, original: bytes | None) -> bytes:
    """The bytes to send for a plugin's value: the original ones when the plugin left the value as shown."""
    if original is not None and shown_value(original) == text:
        return original
    return text.encode("utf-8")
