"""The `koord-runtime-proxy` command line (flag names match koordinator's Go binary)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtimeproxy import __version__
from runtimeproxy.activation import ActivationError, InheritedSockets
from runtimeproxy.allocator import reexec_with_huge_pages, tune_for_large_messages
from runtimeproxy.endpoints import BindAddressError, parse_bind_address
from runtimeproxy.greeting import greet_inherited
from runtimeproxy.klogflags import KlogSettings, add_klog_flags, go_bool, klog_settings
from runtimeproxy.logformat import LOG_FORMATS, configure_logging
from runtimeproxy.usage import OneLineParser, flag_problem, unix_endpoint
from runtimeproxy.options import (
    DEFAULT_ADMIN_SOCKET,
    DEFAULT_DOCKER_SOCKET,
    DEFAULT_HOOK_CONFIG_DIR,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_NRI_REGISTRATION_TIMEOUT,
    DEFAULT_NRI_REQUEST_TIMEOUT,
    DEFAULT_NRI_PLUGIN_CONFIG_PATH,
    DEFAULT_NRI_PLUGIN_PATH,
    DEFAULT_NRI_SOCKET,
    DEFAULT_PROXY_SOCKET,
    DEFAULT_RUNTIME_SOCKET,
    DEFAULT_SKIP_LABEL_KEY,
    DEFAULT_SKIP_LABEL_VALUE,
    DEFAULT_STATE_DIR,
    ProxyOptions,
    default_admin_socket,
    default_metrics_address,
    default_state_dir,
    DEFAULT_HOOK_TRACE_ENTRIES,
)

log = logging.getLogger(__name__)

PROG = "koord-runtime-proxy"
BACKEND_MODES = ("Containerd", "Docker")
LOG_LEVELS = ("debug", "info", "warning", "error")


def _endpoint_or_off(value: str) -> Path | None:
    """A socket path, or None for an empty value (that endpoint off)."""
    return unix_endpoint(value) if value else None


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    by_lower = {choice.lower(): choice for choice in choices}

    def parse(value: str) -> str:
        try:
            return by_lower[value.lower()]
        except KeyError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(choices)}"
            ) from None

    return parse


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a non-negative number")
    return number


def _uid_list(value: str) -> frozenset[int]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not all(item.isdigit() for item in items):
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of uids")
    return frozenset(int(item) for item in items)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return number


def _flag(parser: argparse.ArgumentParser, name: str, **kwargs: object) -> None:
    """Accept --name and Go's single-dash -name alike."""
    parser.add_argument(f"--{name}", f"-{name}", **kwargs)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        allow_abbrev=False,
        description="Transparent CRI proxy between the kubelet and containerd that runs "
        "resource-management hook plugins on pod and container lifecycle calls.",
    )
    _flag(parser, "koord-runtimeproxy-endpoint", type=unix_endpoint, default=DEFAULT_PROXY_SOCKET,
          metavar="PATH", help="unix socket the proxy serves CRI on (default: %(default)s)")
    _flag(parser, "remote-runtime-service-endpoint", type=unix_endpoint, default=None,
          metavar="PATH", help="backend runtime socket, a path or unix:///path (default: "
          f"{DEFAULT_RUNTIME_SOCKET}; {DEFAULT_DOCKER_SOCKET} in Docker mode)")
    _flag(parser, "remote-image-service-endpoint", type=unix_endpoint, default=None,
          metavar="PATH", help="backend image service socket (default: the runtime endpoint)")
    _flag(parser, "backend-runtime-mode", type=_choice(BACKEND_MODES), default="Containerd",
          metavar="MODE", help="Containerd or Docker (default: %(default)s)")
    _flag(parser, "runtime-hook-config-dir", type=Path, default=DEFAULT_HOOK_CONFIG_DIR,
          metavar="DIR", help="directory of plugin registration *.json files (default: %(default)s)")
    _flag(parser, "runtime-hook-config-trusted-uids", type=_uid_list, default=frozenset(),
          metavar="UIDS", help="comma-separated uids trusted, besides root and the proxy's user, to own "
          "plugin config files, their directory and plugin sockets (default: none)")
    _flag(parser, "runtime-hook-server-key", default=DEFAULT_SKIP_LABEL_KEY, metavar="KEY",
          help="pod label key that turns hooks off for a pod (default: %(default)s)")
    _flag(parser, "runtime-hook-server-val", default=DEFAULT_SKIP_LABEL_VALUE, metavar="VALUE",
          help="value of that label that turns hooks off (default: %(default)s)")
    _flag(parser, "shutdown-grace-seconds", type=_positive_float, default=5.0, metavar="SECONDS",
          help="on SIGTERM, how long in-flight calls may finish (default: %(default)s)")
    _flag(parser, "max-request-bytes", type=_positive_int, default=DEFAULT_MAX_REQUEST_BYTES, metavar="BYTES",
          help="largest request message accepted from a client; larger ones get RESOURCE_EXHAUSTED "
          "(default: %(default)s, the kubelet's own limit)")
    _flag(parser, "cri-frame-relay", type=go_bool, nargs="?", const=True, default=True, metavar="BOOL",
          help="serve CRI through an HTTP/2 frame relay: calls no hook intercepts go straight to the runtime "
          "without gRPC's per-call cost; the rest to the gRPC server; =false serves every call through "
          "the gRPC server (default: true)")
    _flag(parser, "log-level", type=_choice(LOG_LEVELS), default=None, metavar="LEVEL",
          help=f"one of {', '.join(LOG_LEVELS)} (default: info; the Go binary's -v=N: 4 and up is debug)")
    _operator_flags(parser)
    _nri_flags(parser)
    add_klog_flags(parser)
    # Benchmark only (bench/): compare the raw-bytes path with decoding every message.
    parser.add_argument("--benchmark-decode-all", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--version", "-version", action="version", version=f"{PROG} {__version__}")
    return parser


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def _metrics_address(value: str) -> str:
    if value:
        try:
            parse_bind_address(value)
        except BindAddressError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _operator_flags(parser: argparse.ArgumentParser) -> None:
    """runtimeproxyctl's socket, the toggle state, metrics and the log format (runtimeproxy.admin)."""
    _flag(parser, "log-format", type=_choice(LOG_FORMATS), default="text", metavar="FORMAT",
          help="text, or json: one object per line (default: %(default)s)")
    _flag(parser, "admin-endpoint", type=_endpoint_or_off, default=argparse.SUPPRESS, metavar="PATH",
          help=f"unix socket (mode 0600) of the admin API runtimeproxyctl talks to; empty disables (default: "
          f"{DEFAULT_ADMIN_SOCKET} for the default CRI socket, else <CRI socket stem>-admin.sock beside it)")
    _flag(parser, "state-dir", type=Path, default=argparse.SUPPRESS, metavar="DIR",
          help=f"where the per-node plugin/hook toggles are kept (default: {DEFAULT_STATE_DIR} for the default "
          f"CRI socket, else {DEFAULT_STATE_DIR}/proxies/<CRI socket path, escaped>)")
    _flag(parser, "metrics-bind-address", type=_metrics_address, default=argparse.SUPPRESS,
          metavar="HOST:PORT", help=f"serves /metrics, /healthz, /readyz; empty disables (default: "
          f"{DEFAULT_METRICS_ADDRESS} for the default CRI socket, else off)")
    _flag(parser, "hook-trace-entries", type=_non_negative_int, default=DEFAULT_HOOK_TRACE_ENTRIES, metavar="N",
          help="hooked calls kept per pod for `runtimeproxyctl trace` (in memory; 0 turns the trace off; "
          "default: %(default)s)")


def _nri_flags(parser: argparse.ArgumentParser) -> None:
    """Hosting NRI plugins (runtimeproxy.nri): off unless asked for."""
    _flag(parser, "enable-nri", action="store_true",
          help=f"host NRI plugins on {DEFAULT_NRI_SOCKET} (NRI's own socket; see --nri-socket)")
    _flag(parser, "nri-socket", type=unix_endpoint, default=None, metavar="PATH",
          help="host NRI plugins on this unix socket (implies --enable-nri; refused if a live NRI server, "
          "e.g. a containerd with NRI on, holds it)")
    _flag(parser, "nri-registration-timeout", type=_positive_float, default=DEFAULT_NRI_REGISTRATION_TIMEOUT,
          metavar="SECONDS", help="how long a connected NRI plugin may take to register (default: %(default)s)")
    _flag(parser, "nri-request-timeout", type=_positive_float, default=DEFAULT_NRI_REQUEST_TIMEOUT,
          metavar="SECONDS", help="how long an NRI plugin may take to answer; one that misses it is detached "
          "(default: %(default)s)")
    _flag(parser, "nri-plugin-path", type=str, default=str(DEFAULT_NRI_PLUGIN_PATH), metavar="DIR",
          help="launch the NRI plugins found here (executables NN-name, owned by trusted uids, as hook plugin "
          "files) when NRI is on; empty: launch none (default: %(default)s)")
    _flag(parser, "nri-plugin-config-path", type=str, default=str(DEFAULT_NRI_PLUGIN_CONFIG_PATH), metavar="DIR",
          help="configs of launched NRI plugins: NN-name.conf, else name.conf (default: %(default)s)")
    _flag(parser, "nri-default-validator-config", type=str, default="", metavar="FILE",
          help="containerd/nri's built-in default validator, configured as containerd 2.2+ reads it: a TOML "
          "file (containerd's config.toml, or its default_validator table's keys); empty: none (default)")


@dataclass(frozen=True)
class CommandLine:
    options: ProxyOptions
    level: str
    klog: KlogSettings


def parse_command_line(argv: Sequence[str] | None = None) -> CommandLine:
    parser = build_parser()
    args = parser.parse_args(argv)
    docker_mode = args.backend_runtime_mode == "Docker"
    listen_path = args.koord_runtimeproxy_endpoint
    klog = klog_settings(args)
    options = ProxyOptions(
        listen_path=listen_path,
        runtime_path=args.remote_runtime_service_endpoint
        or (DEFAULT_DOCKER_SOCKET if docker_mode else DEFAULT_RUNTIME_SOCKET),
        image_path=args.remote_image_service_endpoint,
        backend_mode=args.backend_runtime_mode,
        hook_config_dir=args.runtime_hook_config_dir,
        hook_config_trusted_uids=args.runtime_hook_config_trusted_uids,
        skip_label_key=args.runtime_hook_server_key,
        skip_label_value=args.runtime_hook_server_val,
        shutdown_grace_seconds=args.shutdown_grace_seconds,
        max_request_bytes=args.max_request_bytes,
        frame_relay=args.cri_frame_relay,
        decode_all=args.benchmark_decode_all,
        admin_path=getattr(args, "admin_endpoint", default_admin_socket(listen_path)),
        state_dir=getattr(args, "state_dir", default_state_dir(listen_path)),
        metrics_address=getattr(args, "metrics_bind_address", default_metrics_address(listen_path)) or None,
        log_format=args.log_format,
        hook_trace_entries=args.hook_trace_entries,
        nri_socket=args.nri_socket or (DEFAULT_NRI_SOCKET if args.enable_nri else None),
        nri_registration_timeout=args.nri_registration_timeout,
        nri_request_timeout=args.nri_request_timeout,
        nri_plugin_path=Path(args.nri_plugin_path) if args.nri_plugin_path else None,
        nri_plugin_config_path=Path(args.nri_plugin_config_path) if args.nri_plugin_config_path else None,
        nri_default_validator_config=Path(args.nri_default_validator_config)
        if args.nri_default_validator_config else None,
    )
    return CommandLine(options, args.log_level or klog.level or "info", klog)


def parse_options(argv: Sequence[str] | None = None) -> tuple[ProxyOptions, str]:
    command_line = parse_command_line(argv)
    return command_line.options, command_line.level


def main(argv: Sequence[str] | None = None) -> int:
    command_line = parse_command_line(argv)
    options, klog = command_line.options, command_line.klog
    if options.backend_mode != "Docker":
        # CRI mode's malloc settings first: the process's own command line (not an embedding caller's) re-executed
        # with huge pages before the heavy imports, which the new image would pay again; mallopt before any thread
        # (the early greeting's) and before gRPC allocates anything.
        if argv is None:
            reexec_with_huge_pages()
        tune_for_large_messages()
    try:
        configure_logging(command_line.level, options.log_format, klog.log_file, klog.also_stderr)
    except OSError as error:  # no log yet: stderr, as a usage error, but a start that failed (1)
        print(f"{PROG}: cannot start: " + flag_problem(
            "-log_file/-log_dir", klog.log_file, error, "give a file (-log_file) or directory (-log_dir) this user may "
            "create and write, or log to stderr (drop -logtostderr=false)"), file=sys.stderr)
        return 1
    try:
        inherited = InheritedSockets.from_environment()  # once, before any child is started: they must not see it
        # Before the heavy imports: callers waiting on a passed CRI socket get the server's SETTINGS now.
        greeting = greet_inherited(options, inherited)
    except ActivationError as error:
        log.error("%s", error)
        return 1
    except OSError as error:
        log.error("cannot start: %s", error)
        return 1
    from runtimeproxy import app  # asyncio, the frontends: after the re-exec

    return app.run(options, inherited, greeting, warnings=klog.warnings)
