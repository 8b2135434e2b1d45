"""A kit plugin's command line: serve until SIGTERM/SIGINT, register, or print the registration.

    python3 my_plugin.py --socket /run/my-plugin/plugin.sock \
        --register /etc/runtime/hookserver.d/my-plugin.json [--failure-policy Fail] [--timeout-seconds 2] [--shadow]
    python3 my_plugin.py --socket /run/my-plugin/plugin.sock --print-registration

`main(plugin)` parses these; `serve_until_stopped` is the same without argument parsing. A socket or
registration that cannot be set up is one line on stderr naming the fix, exit code 1, and no socket left behind;
a bad argument is one line naming --help, exit code 2 (runtimeproxy.usage).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from runtimeproxy.hooks.plugin import endpoint_problem
from runtimeproxy.plugin.registration import POLICIES, RegistrationError, registration, write_registration
from runtimeproxy.plugin.service import SOCKET_MODE, HookPlugin
from runtimeproxy.trust import TrustedOwners
from runtimeproxy.usage import OneLineParser, positive_seconds, unix_endpoint


def _octal_mode(value: str) -> int:
    try:
        mode = int(value, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{value!r} is not a permission mode in octal, e.g. 0660")
    return mode


def build_parser(prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog, description=description)
    parser.add_argument("--socket", type=unix_endpoint, required=True, metavar="PATH",
                        help="unix socket to serve on (a path or unix:///path)")
    parser.add_argument("--register", type=Path, metavar="FILE",
                        help="write the registration JSON here once serving: a NAME.json in the directory the proxy watches (its "
                             "--runtime-hook-config-dir, /etc/runtime/hookserver.d by default; created 0755 if "
                             "missing)")
    parser.add_argument("--print-registration", action="store_true",
                        help="print the registration JSON and exit")
    parser.add_argument("--failure-policy", choices=POLICIES, default="Ignore")
    parser.add_argument("--timeout-seconds", type=positive_seconds, metavar="S", help="per call (the proxy's default: 5)")
    parser.add_argument("--shadow", action="store_true",
                        help="register on trial: called, answers traced, never applied (promote: runtimeproxyctl unshadow)")
    parser.add_argument("--socket-mode", type=_octal_mode, default=SOCKET_MODE, metavar="OCTAL",
                        help=f"the socket's permissions (default {SOCKET_MODE:04o})")
    return parser


async def serve_until_stopped(plugin: HookPlugin, socket: Path, register: Path | None = None,
                              document: bytes = b"", mode: int = SOCKET_MODE) -> None:
    """Serve until SIGTERM or SIGINT; the registration is written only once the socket answers.

    The signals are caught before the socket exists: whoever waits for the socket may stop the plugin at once,
    and it then stops as asked (exit 0), not killed by the signal's default action."""
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await plugin.start(socket, mode)
    try:
        if register is not None:
            write_registration(register, document)
        refused = endpoint_problem(socket, TrustedOwners.with_extra())  # serving: only a path the proxy refuses
        if refused:
            print(f"warning: {refused}", file=sys.stderr)
        await stop.wait()
    finally:
        await plugin.stop()
        socket.unlink(missing_ok=True)


def main(plugin: HookPlugin, argv: Sequence[str] | None = None, description: str | None = None) -> int:
    args = build_parser(description=description).parse_args(argv)
    document = registration(args.socket, plugin.implemented_hooks(), args.failure_policy, args.timeout_seconds,
                            args.shadow)
    if args.print_registration:
        sys.stdout.write(document.decode() + "\n")
        return 0
    try:
        asyncio.run(serve_until_stopped(plugin, args.socket, args.register, document, args.socket_mode))
    except RegistrationError as error:
        print(f"{sys.argv[0]}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the socket's directory, or a file in the socket's place
        print(f"{sys.argv[0]}: error: cannot serve on --socket {args.socket}: {error.strerror or error}; "
              "pick a socket path in a directory this user may create or write", file=sys.stderr)
        return 1
    return 0
