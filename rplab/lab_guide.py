"""What a kept lab (`--keep`) leaves its user: every path and command needed next, each working as printed.

The lab's directory holds what the printed commands use, so they run from there (docs/install.md, "The lab"):
- `pod.json` and `container.json`, crictl's sample configs (CRI's JSON field names, numeric enums);
- `crictl.yaml`, crictl's config naming the proxy's CRI socket, given to crictl by `CRI_CONFIG_FILE` (crictl's
  own variable for `--config`): without one, every crictl call warns that /etc/crictl.yaml does not exist (and
  crictl runp and create warn of a pod config without a cgroup parent: pod.json has one);
- `crictl`, a link to the project's crictl (rplab.peers).
It also names the proxy's hook directory (a plugin registers there with `--register`, as the README's first
plugin does) and `runtimeproxyctl` by the path of the virtualenv the lab runs in (it is on no `PATH`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from rplab.cri import CriClient
from rplab.images import LAB_IMAGES
from rplab.peers import PeerBuildError
from rplab.process import ProxyProcess
from rplab.tools import find_tool

CRICTL_CONFIG_ENV = "CRI_CONFIG_FILE"
CRICTL_TIMEOUT_SECONDS = 30
# The lab's pods sit where a kubelet's would, in a hierarchy of the lab's own ("kubepods" on a node); the example
# plugin moves them into its sub-tree of it (rplab.example_plugin.subtree_parent).
CGROUP_HIERARCHY = "runtimeproxy-lab"
SAMPLE_POD_UID = "demo-uid-1"


def pod_cgroup_parent(uid: str) -> str:
    """A Burstable pod's parent as a kubelet with the cgroupfs driver gives it, in the lab's own hierarchy."""
    return f"/{CGROUP_HIERARCHY}/burstable/pod{uid}"


def crictl_document(message: Message) -> dict[str, Any]:
    """A CRI config as crictl reads it. An env value is text: cri-api's KeyValue reads its `value` (bytes since
    cri-api 0.34) from a JSON string as it is, where protobuf's JSON form of bytes is base64 (the container would
    get FROM=Y3JpY3Rs for "crictl")."""
    document = json_format.MessageToDict(message, preserving_proto_field_name=True, use_integers_for_enums=True)
    if "envs" in document:
        document["envs"] = [{"key": env.key, "value": env.value.decode()} for env in message.envs]  # type: ignore
    return document


def write_crictl_samples(base: Path, client: CriClient) -> tuple[Path, Path]:
    """`pod.json` (a pod labelled app=demo, with a cgroup parent: crictl warns without one) and `container.json`."""
    pod = client.pod_config("demo", base / "pod-logs" / "demo", labels={"app": "demo"}, uid=SAMPLE_POD_UID,
                            cgroup_parent=pod_cgroup_parent(SAMPLE_POD_UID))
    container = client.container_config("demo", envs={"FROM": "crictl"})
    paths = base / "pod.json", base / "container.json"
    for path, message in zip(paths, (pod, container)):
        path.write_text(json.dumps(crictl_document(message), indent=2) + "\n")
    return paths


def write_crictl_config(base: Path, cri_socket: Path) -> Path:
    """`crictl.yaml`: the proxy's CRI socket for runtime and images (YAML is a superset of JSON)."""
    endpoint = f"unix://{cri_socket}"
    path = base / "crictl.yaml"
    path.write_text(json.dumps({"runtime-endpoint": endpoint, "image-endpoint": endpoint,
                                "timeout": CRICTL_TIMEOUT_SECONDS}) + "\n")
    return path


def link_crictl(base: Path) -> str:
    """`./crictl`, a link in the lab's directory to the project's crictl; plain `crictl` when it cannot be built."""
    try:
        built = find_tool("crictl")
    except PeerBuildError as error:
        print(f"lab: {error}", file=sys.stderr)
        return "crictl"
    if built is None:
        return "crictl"
    (base / "crictl").symlink_to(built)
    return "./crictl"


def runtimeproxyctl() -> str:
    """runtimeproxyctl by the path of the virtualenv the lab runs in (a lab puts nothing on PATH)."""
    installed = Path(sys.executable).parent / "runtimeproxyctl"
    return str(installed) if installed.exists() else f"{sys.executable} -m runtimeproxy.admin.ctl"


def guide(base: Path, cri_socket: Path, proxy: ProxyProcess, client: CriClient) -> str:
    """Write the crictl files into `base` and say what is running and every command to use it."""
    write_crictl_samples(base, client)
    config = write_crictl_config(base, cri_socket)
    crictl = link_crictl(base)
    ctl = runtimeproxyctl()
    hooks = proxy.hook_config_dir
    lines = [
        "running until Ctrl-C or SIGTERM.",
        f"  lab directory:  {base}",
        f"  CRI socket:     {cri_socket}",
        f"  admin socket:   {proxy.admin_path}",
        f"  hook directory: {hooks} (the proxy's --runtime-hook-config-dir: a plugin registers here)",
        f"  crictl config:  {config}",
        f"  images:         {', '.join(LAB_IMAGES)}",
        "status of the proxy, its backend and plugins:",
        f"  {ctl} --admin-endpoint {proxy.admin_path} status",
        "a plugin of yours (the README's my_plugin.py), registered with this proxy:",
        f"  {sys.executable} my_plugin.py --socket {base}/my-plugin/plugin.sock --register {hooks}/my-plugin.json",
        "crictl, from the lab directory (the samples pod.json and container.json are there):",
        f"  cd {base}",
        f"  export {CRICTL_CONFIG_ENV}={config}",
        f"  {crictl} runp pod.json                             # prints POD_ID",
        f"  {crictl} create POD_ID container.json pod.json     # prints CONTAINER_ID",
        f"  {crictl} start CONTAINER_ID",
        f"  {crictl} exec CONTAINER_ID sh -c 'echo FROM=$FROM'  # FROM=crictl",
    ]
    return "\n".join(lines)
