"""`runtimeproxyctl try-plugin`: call a running plugin's hooks and show what the proxy would make of it.

    runtimeproxyctl try-plugin --endpoint unix:///run/my-plugin/plugin.sock [--hook PreCreateContainer]...
        [--cgroup-driver systemd] [--request FILE.json] [-o json]

Each hook gets a sample request (plugin.samples) or the one in `--request` (a hook request as JSON, or a
line of the lab example plugin's `--record` file). Per hook it prints the answer's status, and for a
pre-hook what the proxy's own validation (hooks.validate) says and, when valid, what the proxy's own merge
(hooks.merge) changes, field by field (hooks.changes), plus a warning when the answer drops environment
variables. It also says whether a proxy would call the socket at all (runtimeproxy.trust: a socket in /tmp is
refused, every call PERMISSION_DENIED) and whether anything listens on it.
Exit code 0: every hook answered and every answer is valid, and a proxy would call the socket; 1: not so;
2: usage (bad arguments, a --request file that cannot be read or is no request of that hook).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from runtimeproxy.endpoints import grpc_target
from runtimeproxy.hooks.changes import FieldChange, dropped_env_names, field_changes, is_map, show
from runtimeproxy.hooks.dispatcher import HOOK_SERVICE, INVALID_ANSWER_CODE, HookPoint
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.hooks.plugin import endpoint_problem
from runtimeproxy.trust import TrustedOwners
from runtimeproxy.hooks.validate import answer_problem, printable
from runtimeproxy.plugin import samples
from runtimeproxy.plugin.service import HOOKS_BY_NAME, Hook
from runtimeproxy.hooks import dispatcher
from runtimeproxy.usage import flag_problem, unix_endpoint

EXIT_OK, EXIT_PROBLEM = 0, 1
DEFAULT_TIMEOUT_SECONDS = 5.0
EXAMPLE_REQUEST = "docs/examples/try-plugin-request.json"  # what the plugin guide shows
# Any: each point has its own request and response types.
_POINTS: dict[str, HookPoint[Any, Any]] = {point.name: point for point in (
    dispatcher.PRE_RUN_POD_SANDBOX, dispatcher.PRE_CREATE_CONTAINER, dispatcher.PRE_START_CONTAINER,
    dispatcher.POST_START_CONTAINER, dispatcher.PRE_UPDATE_CONTAINER_RESOURCES, dispatcher.POST_STOP_CONTAINER,
    dispatcher.POST_STOP_POD_SANDBOX)}


@dataclass
class HookTrial:
    """One hook called once: what came back and what the proxy would do with it."""

    hook: str
    code: str = "OK"  # the call's status
    details: str = ""
    problem: str = ""  # validation's verdict on a pre-hook's answer
    changes: list[FieldChange] = field(default_factory=list)
    dropped_envs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == "OK" and not self.problem

    def as_dict(self) -> dict[str, object]:
        return {"hook": self.hook, "code": self.code, "details": self.details, "problem": self.problem,
                "changes": [{"field": c.field, "before": show(c.before), "after": show(c.after)}
                            for c in self.changes],
                "dropped_envs": self.dropped_envs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", required=True, type=unix_endpoint, metavar="SOCKET",
                        help="the plugin's socket: a path or unix:///path")
    parser.add_argument("--hook", action="append", default=[], metavar="HOOK", choices=HOOK_NAMES,
                        help=f"only this hook (repeatable; default: all): {', '.join(HOOK_NAMES)}")
    parser.add_argument("--cgroup-driver", choices=samples.CGROUP_DRIVERS, default="cgroupfs",
                        help="the cgroup parent form of the sample requests")
    parser.add_argument("--request", type=Path, metavar="FILE",
                        help="a hook request as JSON (or a line of an example plugin --record file) instead of "
                             "the sample; with one --hook, or the record line's hook")


def call_hook(channel: grpc.Channel, hook: Hook, request: Message, timeout: float) -> HookTrial:
    """Call one hook as the proxy does (raw bytes, decoded here) and judge the answer as the proxy would."""
    trial = HookTrial(hook.name)
    try:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{HOOK_SERVICE}/{hook.rpc}")
        raw = call(request.SerializeToString(), timeout=timeout)
    except grpc.RpcError as error:
        trial.code, trial.details = error.code().name, printable(error.details() or "")
        return trial
    try:
        response = hook.response_type.FromString(raw)
    except DecodeError as error:
        trial.code, trial.details = grpc.StatusCode.INTERNAL.name, f"undecodable answer: {error}"
        return trial
    point = _POINTS[hook.name]
    if point.merge is None:
        return trial
    problem = answer_problem(request, response)
    if problem is not None:
        trial.problem = str(problem)
        return trial
    trial.changes = field_changes(request, point.merge(request, response))
    trial.dropped_envs = dropped_env_names(getattr(request, "container_envs", {}),
                                           getattr(response, "container_envs", {}))
    return trial


def requests_to_try(args: argparse.Namespace) -> list[tuple[Hook, Message]]:
    """The hooks to call and their requests; raises ValueError (one line naming the fix) for a bad --request."""
    if args.request is None:
        return [(HOOKS_BY_NAME[name], samples.sample_request(name, args.cgroup_driver))
                for name in (args.hook or HOOK_NAMES)]
    where = f"--request {args.request}"
    try:
        document = orjson.loads(args.request.read_bytes())
    except OSError as error:
        raise ValueError(flag_problem("--request", args.request, error, f"give a file holding a hook request as JSON "
                                      f"(e.g. {EXAMPLE_REQUEST} of a checkout)")) from None
    except orjson.JSONDecodeError as error:
        raise ValueError(f"{where}: not JSON: {error}") from None
    if isinstance(document, dict) and set(document) == {"hook", "request"}:  # a --record line
        hooks_named, document = [document["hook"]], document["request"]
    else:
        hooks_named = args.hook
    if len(hooks_named) != 1:
        raise ValueError("--request needs exactly one --hook (the record line's hook counts)")
    hook = HOOKS_BY_NAME.get(hooks_named[0])
    if hook is None:
        raise ValueError(f"{where}: unknown hook {hooks_named[0]!r}; the hooks: {', '.join(HOOK_NAMES)}")
    return [(hook, parse_request(document, hook.request_type, where))]


def parse_request(document: object, request_type: type[Message], where: str) -> Message:
    """A hook request from JSON with the .proto's (snake_case) field names; a misspelt field is a ValueError
    naming it, the nearest name and the fields accepted there."""
    if not isinstance(document, dict):
        raise ValueError(f"{where}: expected a JSON object (a {request_type.DESCRIPTOR.name}), "
                         f"got {type(document).__name__}")
    _check_field_names(document, request_type.DESCRIPTOR, request_type.DESCRIPTOR.name, where)
    try:
        return json_format.ParseDict(document, request_type())
    except json_format.ParseError as error:
        raise ValueError(f"{where}: {' '.join(str(error).split())}") from None


def _check_field_names(document: dict[str, Any], descriptor: Any, at: str, where: str) -> None:  # Any: upb's too
    fields = {field.name: field for field in descriptor.fields}
    by_json_name = {field.json_name: field for field in descriptor.fields}  # camelCase: protobuf's JSON accepts it
    for key, value in document.items():
        field = fields.get(key) or by_json_name.get(key)
        if field is None:
            close = difflib.get_close_matches(key.lower(), fields, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: {at} has no field {key!r}{hint}; its fields: {', '.join(fields)}")
        if field.message_type is not None and not is_map(field):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    _check_field_names(item, field.message_type, f"{at}.{field.name}", where)


def socket_warning(socket: Path) -> str:
    """Why a proxy (as root, the usual case) would fail every call to this socket, or "": one it refuses
    (runtimeproxy.trust: the path walk a proxy makes before each call), none there, nobody listening."""
    return endpoint_problem(socket, TrustedOwners.with_extra())


def try_plugin(socket: Path, requests: Sequence[tuple[Hook, Message]], timeout: float) -> list[HookTrial]:
    with grpc.insecure_channel(grpc_target(socket)) as channel:
        return [call_hook(channel, hook, request, timeout) for hook, request in requests]


def render(trials: Sequence[HookTrial], warning: str) -> str:
    lines = [f"warning: {warning}"] if warning else []
    for trial in trials:
        lines.append(f"{trial.hook}: {_verdict(trial)}")
        lines += [f"    {change}" for change in trial.changes]
        if trial.dropped_envs:
            lines.append(f"    warning: the answer's container_envs lacks {', '.join(trial.dropped_envs)}: "
                         "the proxy removes them from the container (answer every variable, or use "
                         "runtimeproxy.plugin, which echoes them)")
    return "\n".join(lines) + "\n"


def _verdict(trial: HookTrial) -> str:
    if trial.code != "OK":
        return (f"FAILED {trial.code}: {trial.details} -- the proxy treats this as a plugin failure: with "
                "failure-policy Ignore the call goes on without it, with Fail a pre-hook fails the CRI call")
    if trial.problem:
        return (f"INVALID answer, {trial.problem} -- the proxy applies none of it: a plugin failure "
                f"({INVALID_ANSWER_CODE.name}) under its failure policy")
    if trial.hook not in _POINTS or _POINTS[trial.hook].merge is None:
        return "answered (a post-hook: its answer changes nothing)"
    return "valid; the proxy would change:" if trial.changes else "valid; no change"


def run(args: argparse.Namespace, socket: Path, out: TextIO, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> int:
    trials = try_plugin(socket, requests_to_try(args), timeout)
    warning = socket_warning(socket)
    if args.output == "json":
        out.write(orjson.dumps({"endpoint": str(socket), "warning": warning,
                                "hooks": [trial.as_dict() for trial in trials]},
                               option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(render(trials, warning))
    return EXIT_OK if all(trial.ok for trial in trials) and not warning else EXIT_PROBLEM
