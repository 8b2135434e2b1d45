"""Consumer Go modules for upstream programs whose go.mod has ``replace`` directives (the kubelet, koordinator).

``go install MODULE/cmd/X@VERSION`` refuses a module with replace directives, so such a program is built from a
module of the project's own under ``peers/<name>/``: its go.mod copies the upstream module's ``replace (...)``
block (a rule onto a path inside the upstream repository, as k8s.io/kubernetes's staging modules, becomes a rule
onto that module at the version the upstream release publishes it as), requires the upstream module at its pinned
version and names each program as a ``tool``. The generated go.mod and go.sum are committed; builds read them with
``-mod=readonly``, so a build is the same everywhere. A version bump is one command:

    python -m rplab.consumer_modules generate kubelet [--version v1.35.9]   # rewrites peers/kubelet/go.{mod,sum}
    python -m rplab.consumer_modules check                                  # every committed go.mod is as generated

Nothing third-party is kept in the repository: the sources come from the Go module proxy at build time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rplab.gotoolchain import GoToolchainError, go_toolchain
from runtimeproxy.usage import OneLineParser

PEERS_DIR = Path(__file__).resolve().parent.parent / "peers"
GO_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class ConsumerModule:
    """One consumer module: ``peers/<name>/`` builds ``tools`` (package paths) of ``upstream`` at ``version``.
    ``staging_version`` turns a replace onto ``./staging/src/<path>`` into ``<path> <staging_version>``
    (Kubernetes publishes each staging module as v0.<minor>.<patch> of its release v1.<minor>.<patch>)."""

    name: str
    upstream: str
    version: str
    tools: tuple[str, ...]
    # Stamped at link time, as the upstream release build does (``--version`` then tells the truth).
    version_variables: tuple[tuple[str, str], ...] = ()
    # The program is a main package of the module's own (peers/<name>/*.go) over the upstream's library, for an
    # upstream whose own main module the Go module proxy does not serve (etcd: its main calls server/v3's etcdmain).
    own_main: bool = False
    # The upstream's replaces onto local paths are its sibling modules, published at the versions it requires
    # (etcd's ../api, ../client/v3, …): dropped, as its release consumers see it.
    local_siblings_published: bool = False

    @property
    def directory(self) -> Path:
        return PEERS_DIR / self.name

    def staging_version(self) -> str:
        major_minor_patch = self.version.lstrip("v").split(".")
        return "v0." + ".".join(major_minor_patch[1:])


def kubernetes_version_variables(version: str) -> tuple[tuple[str, str], ...]:
    major, minor, _ = version.lstrip("v").split(".", 2)
    base = "k8s.io/component-base/version"
    return ((f"{base}.gitVersion", version), (f"{base}.gitMajor", major), (f"{base}.gitMinor", minor),
            (f"{base}.gitTreeState", "clean"))


KUBERNETES_VERSION = "v1.35.8"
# The newest Kubernetes release: its kubelet where it runs (cgroup v2, the systemd guest; rplab.guest_kubelet).
NEWEST_KUBERNETES_VERSION = "v1.37.2"
KOORDINATOR_VERSION = "v1.8.0"
ETCD_VERSION = "v3.6.5"
# One module per program, so that adding a program leaves the digests (and cached binaries) of the others alone.
MODULES: dict[str, ConsumerModule] = {module.name: module for module in (
    # The kubelet of one Kubernetes release, and the small cluster's API server of the same release.
    ConsumerModule("kubelet", "k8s.io/kubernetes", KUBERNETES_VERSION, ("k8s.io/kubernetes/cmd/kubelet",),
                   kubernetes_version_variables(KUBERNETES_VERSION)),
    ConsumerModule("kubelet-newest", "k8s.io/kubernetes", NEWEST_KUBERNETES_VERSION, ("k8s.io/kubernetes/cmd/kubelet",),
                   kubernetes_version_variables(NEWEST_KUBERNETES_VERSION)),
    ConsumerModule("kube-apiserver", "k8s.io/kubernetes", KUBERNETES_VERSION,
                   ("k8s.io/kubernetes/cmd/kube-apiserver",), kubernetes_version_variables(KUBERNETES_VERSION)),
    # koordinator's own runtime proxy: the reference this project replaces; and koordlet, the plugin it serves.
    ConsumerModule("koordinator", "github.com/koordinator-sh/koordinator", KOORDINATOR_VERSION,
                   ("github.com/koordinator-sh/koordinator/cmd/koord-runtime-proxy",)),
    ConsumerModule("koordlet", "github.com/koordinator-sh/koordinator", KOORDINATOR_VERSION,
                   ("github.com/koordinator-sh/koordinator/cmd/koordlet",)),
    # The small cluster's etcd: peers/etcd/main.go calls the server module's etcdmain, as etcd's own main does.
    ConsumerModule("etcd", "go.etcd.io/etcd/server/v3", ETCD_VERSION, ("go.etcd.io/etcd/server/v3/etcdmain",),
                   own_main=True, local_siblings_published=True),
)}


class ConsumerModuleError(RuntimeError):
    pass


def go_environment() -> dict[str, str]:
    return {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto")}


def run_go(go: Path, arguments: list[str], cwd: Path) -> str:
    done = subprocess.run([str(go), *arguments], cwd=cwd, env=go_environment(), capture_output=True, text=True,
                          timeout=GO_TIMEOUT_SECONDS)
    if done.returncode != 0:
        raise ConsumerModuleError(f"go {' '.join(arguments)} failed in {cwd}: {done.stderr.strip()[-3000:]}")
    return done.stdout


def upstream_go_mod(go: Path, module: ConsumerModule) -> str:
    """The upstream release's go.mod, as the Go module proxy serves it."""
    with tempfile.TemporaryDirectory(prefix="rp-consumer-") as scratch:
        Path(scratch, "go.mod").write_text("module scratch\n")
        answer = json.loads(run_go(go, ["mod", "download", "-json", f"{module.upstream}@{module.version}"],
                                   Path(scratch)))
    if "GoMod" not in answer:
        raise ConsumerModuleError(f"the module proxy has no go.mod for {module.upstream}@{module.version}: {answer}")
    return Path(answer["GoMod"]).read_text()


REPLACE_RULE = re.compile(r"^\s*(\S+)(?:\s+(v\S+))?\s*=>\s*(\S+)(?:\s+(v\S+))?\s*$")


def replace_rules(go_mod: str, module: ConsumerModule) -> list[str]:
    """The upstream replace rules, comments dropped, local paths turned into published versions."""
    rules: list[str] = []
    in_block = False
    for line in go_mod.splitlines():
        text = line.split("//", 1)[0].strip()
        if text.startswith("replace ("):
            in_block = True
            continue
        if in_block and text == ")":
            in_block = False
            continue
        if text.startswith("replace "):
            text = text.removeprefix("replace ").strip()
        elif not in_block or not text:
            continue
        matched = REPLACE_RULE.match(text)
        if matched is None:
            raise ConsumerModuleError(f"{module.upstream}'s go.mod: cannot read the replace rule {line.strip()!r}")
        old, old_version, new, new_version = matched.groups()
        if new.startswith("./") or new.startswith("../"):
            if module.local_siblings_published:
                continue
            if not new.startswith("./staging/src/"):
                raise ConsumerModuleError(f"{module.upstream}: a replace onto {new} has no published module")
            new, new_version = new.removeprefix("./staging/src/"), module.staging_version()
        rules.append(f"\t{old}{' ' + old_version if old_version else ''} => {new} {new_version}")
    return rules


def consumer_go_mod(module: ConsumerModule, upstream: str) -> str:
    go_line = re.search(r"^go (\S+)$", upstream, re.M)
    header = (f"// Generated by `python -m rplab.consumer_modules generate {module.name}`: do not edit.\n"
              f"// Builds {'its own main over ' if module.own_main else ''}{', '.join(module.tools)} of "
              f"{module.upstream} {module.version} with its own replace block.\n"
              f"module runtimeproxy/peers/{module.name}\n\ngo {go_line.group(1) if go_line else '1.25.0'}\n")
    rules = replace_rules(upstream, module)
    return header + ("\nreplace (\n" + "\n".join(rules) + "\n)\n" if rules else "")


def generate(go: Path, module: ConsumerModule) -> None:
    """Writes peers/<name>/go.mod and go.sum for ``module`` (the sources stay in the module cache)."""
    module.directory.mkdir(parents=True, exist_ok=True)
    (module.directory / "go.sum").unlink(missing_ok=True)
    (module.directory / "go.mod").write_text(consumer_go_mod(module, upstream_go_mod(go, module)))
    for tool in module.tools:
        run_go(go, ["get", *([] if module.own_main else ["-tool"]), f"{tool}@{module.version}"], module.directory)
    # go get leaves out the sums of packages only the tools' own tests need; a readonly build needs the rest.
    run_go(go, ["mod", "download"], module.directory)
    for package in ["."] if module.own_main else module.tools:
        run_go(go, ["list", "-deps", package], module.directory)


def is_as_generated(go: Path, module: ConsumerModule) -> bool:
    """Whether the committed go.mod still carries the upstream replace block as the generator writes it."""
    committed = (module.directory / "go.mod").read_text()
    upstream = upstream_go_mod(go, module)  # asked of the module proxy once
    header = consumer_go_mod(module, upstream).split("\nreplace (")[0]
    return committed.startswith(header) and all(rule in committed for rule in replace_rules(upstream, module))


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rplab.consumer_modules", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    generating = commands.add_parser("generate", help="write peers/NAME/go.mod and go.sum")
    generating.add_argument("names", nargs="+", choices=sorted(MODULES))
    generating.add_argument("--version", help="another upstream version than the pinned one (then edit the pin)")
    commands.add_parser("check", help="check every committed consumer go.mod against its upstream")
    args = parser.parse_args(argv)
    try:
        go = go_toolchain()
        if args.command == "generate":
            for name in args.names:
                module = MODULES[name]
                if args.version:
                    module = dataclasses.replace(module, version=args.version)
                generate(go, module)
                print(f"{name}: {module.directory}/go.mod for {module.upstream} {module.version}")
            return 0
        stale = [name for name, module in MODULES.items() if not is_as_generated(go, module)]
        for name in stale:
            print(f"peers/{name}/go.mod is not as generated: python -m rplab.consumer_modules generate {name}",
                  file=sys.stderr)
        return 1 if stale else 0
    except (ConsumerModuleError, GoToolchainError) as error:
        print(f"rplab.consumer_modules: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
