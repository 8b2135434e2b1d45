"""klog's flags, accepted so that unit files written for koordinator's Go koord-runtime-proxy start this one.

The Go binary registers klog's flag set (klog.InitFlags) beside its own: -v, -vmodule, -logtostderr,
-alsologtostderr, -log_dir, -log_file, -log_file_max_size, -stderrthreshold, -add_dir_header, -skip_headers,
-skip_log_headers, -one_output, -log_backtrace_at. What they mean here:
- -v=N sets the log level when --log-level is not given: N >= 4 is debug (koordinator logs call details at
  klog V(4) and up), below that info.
- -log_file / -log_dir write the log to that file (log_dir: <dir>/koord-runtime-proxy.log) when
  -logtostderr=false, and to stderr as well with -alsologtostderr. This is klog's own rule: with -logtostderr
  true, its default, klog ignores both.
- The others shape klog's own output and have no meaning here: one warning names them.
Go spells them with underscores; dashes (--log-file) are accepted too, as component-base normalizes them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

# Where -log_dir puts the log, as klog names its files after the program.
LOG_DIR_FILE_NAME = "koord-runtime-proxy.log"
# klog -v at or above this is our debug level.
DEBUG_VERBOSITY = 4
_NO_MEANING_HERE = ("vmodule", "log_file_max_size", "stderrthreshold", "add_dir_header", "skip_headers",
                    "skip_log_headers", "one_output", "log_backtrace_at")
_BOOLEANS = ("logtostderr", "alsologtostderr", "add_dir_header", "skip_headers", "skip_log_headers", "one_output")
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class KlogSettings:
    """What the klog flags ask of logging here."""

    level: str | None = None  # from -v; None: not given
    log_file: Path | None = None  # None: stderr only
    also_stderr: bool = True
    warnings: list[str] = field(default_factory=list)  # logged once at start


def go_bool(value: str) -> bool:
    """Go's strconv.ParseBool, as flag parses -logtostderr=VALUE."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean (true or false)")


def _verbosity(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a klog verbosity (a whole number >= 0)")
    return int(value)


def add_klog_flags(parser: argparse.ArgumentParser) -> None:
    """Register klog's flags (single and double dash, underscores or dashes), hidden from --help."""
    group = parser.add_argument_group("klog flags of the Go binary (accepted for drop-in use)")

    def flag(name: str, **kwargs: object) -> None:
        spellings = {f"-{name}", f"--{name}", f"-{name.replace('_', '-')}", f"--{name.replace('_', '-')}"}
        group.add_argument(*sorted(spellings), dest=f"klog_{name}", default=None, help=argparse.SUPPRESS,
                           **kwargs)  # type: ignore[arg-type]

    flag("v", type=_verbosity, metavar="N")
    for name in _BOOLEANS:
        flag(name, type=go_bool, nargs="?", const=True)
    for name in ("log_file", "log_dir"):
        flag(name, type=Path)
    for name in ("vmodule", "log_file_max_size", "stderrthreshold", "log_backtrace_at"):
        flag(name)


def klog_settings(args: argparse.Namespace) -> KlogSettings:
    """The logging the parsed klog flags ask for, and one warning for what has no meaning here."""
    verbosity = args.klog_v
    level = None if verbosity is None else ("debug" if verbosity >= DEBUG_VERBOSITY else "info")
    to_stderr = args.klog_logtostderr is not False  # klog's default is true
    target = args.klog_log_file or (args.klog_log_dir / LOG_DIR_FILE_NAME if args.klog_log_dir else None)
    warnings = []
    if target is not None and to_stderr:
        warnings.append(f"klog flag -log_file/-log_dir ignored as klog ignores it with -logtostderr=true "
                        f"(pass -logtostderr=false to log to {target})")
        target = None
    meaningless = [f"-{name}" for name in _NO_MEANING_HERE if getattr(args, f"klog_{name}") is not None]
    if meaningless:
        warnings.append(f"klog flag(s) {', '.join(meaningless)} accepted for compatibility with the Go "
                        f"koord-runtime-proxy; they have no effect here")
    return KlogSettings(level=level, log_file=target, also_stderr=target is None or bool(args.klog_alsologtostderr),
                        warnings=warnings)
