"""`runtimeproxyctl`: the operator's command line for a running proxy, over its admin socket (the command: its
arguments, the admin calls, exit codes and errors; the human tables are admin.render's).

    runtimeproxyctl status
    runtimeproxyctl disable koordlet [--hook PreCreateContainer]... --reason "fail policy blocks pods"
    runtimeproxyctl disable koordlet --stage --reason "..."   # no koordlet.json on this node yet
    runtimeproxyctl enable koordlet [--hook ...]...
    runtimeproxyctl disable 10-name [--hook CreateContainer]... --reason "..."   # an NRI plugin, or its events
    runtimeproxyctl disable --all --reason "..." / enable --all
    runtimeproxyctl try-plugin --endpoint unix:///run/my-plugin/plugin.sock [--hook HOOK]...  (no proxy needed)
    runtimeproxyctl trace POD       # namespace/name, pod uid, sandbox or container ID: its hooked calls
    runtimeproxyctl shadow koordlet-next / unshadow koordlet-next   # on trial (called, never applied) / promoted
    runtimeproxyctl shadow koordlet-next --stage     # not registered yet: it starts on trial when it registers

Human tables by default, `-o json` for machines; notes about a change (nothing to enable, a
toggle replaced, still off by `disable --all`) go to stderr. Exit codes:

    0  ok (also an `enable` that found nothing to enable: the plugin is on, as asked)
    1  the proxy could not be reached, or refused (one line naming the socket; where nothing listens: why, and
       the fix)
    2  usage: bad arguments, an unknown hook name (for an NRI plugin: NRI event name), a missing --reason, a
       try-plugin --request file that cannot be read or is no request (one line: runtimeproxy.usage)
    3  no such plugin: the name is no config file of the proxy's (nor, for enable, a toggle's);
       nothing changed (for trace: no trace of that pod). A typo must not look like a disabled plugin:
       `--stage` disables a name whose file is not there yet (status shows it as staged).
    4  status: the proxy answered, but a backend (the runtime) is not reachable; the table says why

A socket that answers gRPC but not the admin API (the CRI socket, say) is one line naming the admin socket.

The toggle's author is who this command runs as (and SUDO_USER), as it reports it: gRPC does
not give the proxy the socket peer's credentials, and the socket is root-only anyway.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import grpc
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from runtimeproxy import __version__
from runtimeproxy.endpoints import EndpointError, grpc_target, listener_problem, parse_unix_endpoint
from runtimeproxy.options import DEFAULT_ADMIN_SOCKET
from runtimeproxy.pb.admin.runtimeproxy.admin.v1 import admin_pb2 as admin, admin_pb2_grpc
from runtimeproxy.admin.render import render_shadows, render_status, render_toggles, render_trace
from runtimeproxy.hooks.nri_events import EVENT_NAMES
from runtimeproxy.hooks.names import HOOK_NAMES
from runtimeproxy.plugin import trying
from runtimeproxy.usage import EXIT_USAGE, OneLineParser, positive_seconds, unix_endpoint

PROG = "runtimeproxyctl"
EXIT_OK, EXIT_UNREACHABLE, EXIT_NO_SUCH_PLUGIN, EXIT_BACKEND_DOWN = 0, 1, 3, 4  # and usage's EXIT_USAGE, 2
DEFAULT_TIMEOUT_SECONDS = 5.0
ADMIN_ENDPOINT_ENV = "RUNTIMEPROXY_ADMIN_ENDPOINT"  # the admin socket, so a second proxy's need not be repeated
OUTPUTS = ("table", "json")


def build_parser() -> argparse.ArgumentParser:
    # Common options are accepted before and after the command (`status -o json`).
    common = OneLineParser(add_help=False)
    common.add_argument("--admin-endpoint", type=unix_endpoint, default=argparse.SUPPRESS, metavar="PATH",
                        help=f"the proxy's admin socket (default: ${ADMIN_ENDPOINT_ENV}, else {DEFAULT_ADMIN_SOCKET})")
    common.add_argument("-o", "--output", choices=OUTPUTS, default=argparse.SUPPRESS,
                        help="table (default) or json")
    common.add_argument("--timeout", type=positive_seconds, default=argparse.SUPPRESS, metavar="SECONDS",
                        help=f"per request (default: {DEFAULT_TIMEOUT_SECONDS:g})")
    parser = OneLineParser(prog=PROG, parents=[common], allow_abbrev=False,
                     description="Inspect a running runtimeproxy and toggle its hook plugins on this node.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    commands.add_parser("status", parents=[common], help="version, backends, plugins and their calls, toggles")
    for name, verb in (("disable", "turn off"), ("enable", "turn on again")):
        command = commands.add_parser(name, parents=[common], help=f"{verb} a plugin, some of its hooks, or all")
        command.add_argument("plugin", nargs="?", help="the plugin's config file name (koordlet.json or koordlet), "
                             "or an NRI plugin's id (10-name, or nri:10-name)")
        command.add_argument("--hook", action="append", default=[], metavar="HOOK",
                             help=f"only this hook (repeatable): {', '.join(HOOK_NAMES)}; of an NRI plugin, only "
                             f"this NRI event: {', '.join(EVENT_NAMES)}")
        command.add_argument("--all", action="store_true", help="every plugin's every hook on this node")
        if name == "disable":
            command.add_argument("--reason", required=True, help="why; logged and shown in status")
            command.add_argument("--stage", action="store_true",
                                 help="accept a PLUGIN with no config file (yet): the toggle applies when it appears")
    trace = commands.add_parser("trace", parents=[common], help="why a pod got what it got: each hooked call of "
                                "the pod and its containers, plugin by plugin, oldest first")
    trace.add_argument("pod", metavar="POD", help="namespace/name, pod uid, sandbox or container ID (or a unique "
                       "prefix), or a pod name")
    for name, verb in (("shadow", "put a plugin on trial: called on its hooks, its answers traced, never applied"),
                       ("unshadow", "take a plugin off trial: its answers are applied (promote it)")):
        command = commands.add_parser(name, parents=[common], help=verb)
        command.add_argument("plugin", help="the plugin's config file name: koordlet-next.json or koordlet-next")
        if name == "shadow":
            command.add_argument("--stage", action="store_true", help="accept a PLUGIN not registered (yet): it "
                                 "starts in shadow when it registers, never live first")
    try_plugin = commands.add_parser(
        "try-plugin", parents=[common], help="call a running plugin's hooks with sample requests; show what the "
        "proxy's validation and merge make of its answers (no proxy needed)")
    trying.add_arguments(try_plugin)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "admin_endpoint"):  # a proxy on another socket: set once, not on every command
        try:
            args.admin_endpoint = parse_unix_endpoint(os.environ.get(ADMIN_ENDPOINT_ENV) or str(DEFAULT_ADMIN_SOCKET))
        except EndpointError as error:
            parser.error(f"${ADMIN_ENDPOINT_ENV}: {error}")
    args.output = getattr(args, "output", "table")
    args.timeout = getattr(args, "timeout", DEFAULT_TIMEOUT_SECONDS)
    if args.command in ("disable", "enable"):
        if args.all == bool(args.plugin):
            parser.error(f"{args.command}: name one PLUGIN, or --all")
        if args.all and args.hook:
            parser.error(f"{args.command}: --all applies to every hook; drop --hook")
        if args.all and getattr(args, "stage", False):
            parser.error(f"{args.command}: --stage names one PLUGIN; drop --all")
    return args


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = parse_args(argv)
    out = out or sys.stdout
    if args.command == "try-plugin":
        return _try_plugin(args, out)
    target = grpc_target(args.admin_endpoint)
    with grpc.insecure_channel(target) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        try:
            answer = _call(stub, args)
        except grpc.RpcError as error:
            return _report_failure(error, args)
    if args.output == "json":
        out.write(orjson.dumps(_as_dict(answer), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif isinstance(answer, admin.StatusResponse):
        out.write(render_status(answer))
    elif isinstance(answer, admin.TraceResponse):
        out.write(render_trace(answer))
    elif isinstance(answer, admin.ShadowResponse):
        for note in answer.notes:
            print(f"{PROG}: {note}", file=sys.stderr)
        out.write(render_shadows(answer.settings))
    elif isinstance(answer, admin.ToggleResponse):
        for note in answer.notes:
            print(f"{PROG}: {note}", file=sys.stderr)
        out.write(render_toggles(answer.toggles))
    if isinstance(answer, admin.StatusResponse) and not all(backend.reachable for backend in answer.backends):
        return EXIT_BACKEND_DOWN
    return EXIT_OK


def _try_plugin(args: argparse.Namespace, out: TextIO) -> int:
    try:
        return trying.run(args, args.endpoint, out, args.timeout)
    except ValueError as error:  # a bad --request file
        print(f"{PROG}: error: try-plugin: {error}", file=sys.stderr)
        return EXIT_USAGE


def _call(stub: admin_pb2_grpc.AdminStub, args: argparse.Namespace) -> Message:
    if args.command == "status":
        return stub.Status(admin.StatusRequest(), timeout=args.timeout)
    if args.command == "trace":
        return stub.Trace(admin.TraceRequest(pod=args.pod), timeout=args.timeout)
    if args.command in ("shadow", "unshadow"):
        rpc = stub.Shadow if args.command == "shadow" else stub.Unshadow
        return rpc(admin.ShadowRequest(plugin=args.plugin, author=author(), stage=getattr(args, "stage", False)),
                   timeout=args.timeout)
    request = admin.ToggleRequest(plugin=args.plugin or "", hooks=args.hook, all=args.all,
                                  reason=getattr(args, "reason", ""), stage=getattr(args, "stage", False),
                                  author=author())
    rpc = stub.Disable if args.command == "disable" else stub.Enable
    return rpc(request, timeout=args.timeout)


def author() -> str:
    """Who runs this command: the user, and who became it through sudo (as the proxy records it)."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = f"uid {uid}"
    sudo_user = os.environ.get("SUDO_USER", "")
    return f"{name} (sudo: {sudo_user})" if sudo_user and sudo_user != name else name


# What an unknown PLUGIN's error adds where the command can stage it.
_STAGE_HINT = {"disable": " To stage a toggle for a file that is not there yet, add --stage",
               "shadow": " To put a plugin on trial before it registers, add --stage"}


def _report_failure(error: grpc.RpcError, args: argparse.Namespace) -> int:
    code, details = error.code(), error.details() or ""
    socket: Path = args.admin_endpoint
    if code is grpc.StatusCode.NOT_FOUND and args.command == "trace":
        print(f"{PROG}: {details}", file=sys.stderr)
        return EXIT_NO_SUCH_PLUGIN
    if code is grpc.StatusCode.NOT_FOUND:
        if args.command in ("disable", "shadow"):
            details += "" if details.endswith("?") else "."
            details += _STAGE_HINT[args.command]
        print(f"{PROG}: {details}", file=sys.stderr)
        return EXIT_NO_SUCH_PLUGIN
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        print(f"{PROG}: error: {details}", file=sys.stderr)
        return EXIT_USAGE
    if code is grpc.StatusCode.UNIMPLEMENTED:
        print(f"{PROG}: {socket} is not a runtimeproxy admin socket (it answers gRPC, but not the admin API: the "
              f"CRI socket?); the admin socket is {DEFAULT_ADMIN_SOCKET} by default (the proxy's --admin-endpoint): "
              f"pass --admin-endpoint PATH or set ${ADMIN_ENDPOINT_ENV}", file=sys.stderr)
        return EXIT_UNREACHABLE
    unreached = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    unanswered = listener_problem(socket) if unreached else ""
    if unanswered:  # the usual mistake: no proxy running, or another socket than its --admin-endpoint
        print(f"{PROG}: cannot reach the proxy's admin socket: {unanswered}; start the proxy, or name its admin "
              f"socket (the proxy's --admin-endpoint): --admin-endpoint PATH or ${ADMIN_ENDPOINT_ENV}", file=sys.stderr)
    elif unreached:
        print(f"{PROG}: cannot reach the proxy's admin socket {socket}: {code.name}: {details}", file=sys.stderr)
    else:
        print(f"{PROG}: the proxy at {socket} refused: {code.name}: {details}", file=sys.stderr)
    return EXIT_UNREACHABLE


def _as_dict(message: Message) -> dict[str, object]:
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True, unquote_int64_if_possible=True)


if __name__ == "__main__":
    sys.exit(main())
