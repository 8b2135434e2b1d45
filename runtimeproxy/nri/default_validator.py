"""containerd/nri's built-in default validator (plugins/default-validator, v0.12.5), configured as containerd 2.2+
reads it: the table `[plugins."io.containerd.nri.v1.nri".default_validator]` of containerd's config.toml, with its
keys (`enable`, `reject_oci_hook_adjustment`, `reject_runtime_default_seccomp_adjustment`,
`reject_unconfined_seccomp_adjustment`, `reject_custom_seccomp_adjustment`, `reject_namespace_adjustment`,
`reject_sysctl_adjustment`, `required_plugins`, `tolerate_missing_plugins_annotation`). The proxy reads the file
`--nri-default-validator-config` names: containerd's own config.toml, a file with a `[default_validator]` table, or
one with the keys alone. It runs as containerd's does: plugin "00-default-validator", listed among the plugins that
took part, its rejection worded as there.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from runtimeproxy.pb.nri.pkg.api.v1alpha1 import api_pb2 as nri

DEFAULT_VALIDATOR_ID = ("default-validator", "00")  # (name, index), as containerd/nri registers the builtin
DEFAULT_VALIDATOR_NAME = "00-default-validator"
REQUIRED_PLUGINS_ANNOTATION = "required-plugins.noderesource.dev"
_CONTAINERD_TABLE = ("plugins", "io.containerd.nri.v1.nri", "default_validator")


@dataclass(frozen=True)
class DefaultValidatorConfig:
    enable: bool = False
    reject_oci_hook_adjustment: bool = False
    reject_runtime_default_seccomp_adjustment: bool = False
    reject_unconfined_seccomp_adjustment: bool = False
    reject_custom_seccomp_adjustment: bool = False
    reject_namespace_adjustment: bool = False
    reject_sysctl_adjustment: bool = False
    required_plugins: tuple[str, ...] = ()
    tolerate_missing_plugins_annotation: str = ""


def load_config(path: Path) -> DefaultValidatorConfig:
    """The validator's table of a TOML file; ValueError names an unknown key or a wrong type."""
    document = tomllib.loads(path.read_text())
    table = document
    if "plugins" in document:
        for key in _CONTAINERD_TABLE:
            table = table.get(key, {})
    elif "default_validator" in document:
        table = document["default_validator"]
    known = {field.name: field for field in fields(DefaultValidatorConfig)}
    values: dict[str, object] = {}
    for key, value in table.items():
        if key not in known:
            raise ValueError(f"{path}: unknown default validator key {key!r} (known: {', '.join(known)})")
        if key == "required_plugins":
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{path}: required_plugins: expected a list of strings")
            value = tuple(value)
        elif not isinstance(value, type(known[key].default)):
            raise ValueError(f"{path}: {key}: expected a {type(known[key].default).__name__}")
        values[key] = value
    return DefaultValidatorConfig(**values)  # type: ignore[arg-type]


def _effective_annotation(pod: nri.PodSandbox, key: str, container: str) -> str | None:
    """containerd/nri's GetEffectiveAnnotation: container scope, then pod scope, then the bare key."""
    for name in (f"{key}/container.{container}", f"{key}/pod", key):
        if name in pod.annotations:
            return pod.annotations[name]
    return None


def _parse_bool(value: str) -> bool:
    """Go's strconv.ParseBool."""
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _yaml_list(value: str) -> list[str] | None:
    """The annotation's YAML list of names in its two usual spellings: flow (`["a", "b"]`, JSON's) or block
    (`- a` lines); None for anything else."""
    try:
        flow = json.loads(value)
    except ValueError:
        lines = [line.strip() for line in value.splitlines() if line.strip()]
        if not all(line.startswith("- ") for line in lines):
            return None
        return [line[2:].strip().strip("'\"") for line in lines]
    return [str(item) for item in flow] if isinstance(flow, list) else None


class DefaultValidator:
    def __init__(self, config: DefaultValidatorConfig) -> None:
        self.config = config

    def validate(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        """The rejection's reason (the Go validator's error text), None when it accepts."""
        for check in (self._oci_hooks, self._seccomp, self._namespaces, self._required_plugins, self._sysctl):
            reason = check(request)
            if reason is not None:
                return reason
        return None

    def _owners(self, request: nri.ValidateContainerAdjustmentRequest) -> nri.FieldOwners | None:
        owners = request.owners.owners
        return owners[request.container.id] if request.container.id in owners else None

    def _oci_hooks(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        owners = self._owners(request)
        if not self.config.reject_oci_hook_adjustment or owners is None or nri.OciHooks not in owners.simple:
            return None
        owner = owners.simple[nri.OciHooks]
        offender = f'plugins "{owner}"' if "," in owner else f'plugin "{owner}"'
        return f"validation error: {offender} attempted restricted OCI hook injection"

    def _seccomp(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        owners = self._owners(request)
        if owners is None or nri.SeccompPolicy not in owners.simple:
            return None
        owner = owners.simple[nri.SeccompPolicy]
        linux = request.container.linux
        kind = linux.seccomp_profile.profile_type if linux.HasField("seccomp_profile") else nri.SecurityProfile.UNCONFINED
        if kind == nri.SecurityProfile.UNCONFINED and self.config.reject_unconfined_seccomp_adjustment:
            return f"validation error: plugin {owner} attempted restricted  unconfined seccomp policy adjustment"
        if kind == nri.SecurityProfile.RUNTIME_DEFAULT and self.config.reject_runtime_default_seccomp_adjustment:
            return f"validation error: plugin {owner} attempted restricted runtime default seccomp policy adjustment"
        if kind == nri.SecurityProfile.LOCALHOST and self.config.reject_custom_seccomp_adjustment:
            return f"validation error: plugin {owner} attempted restricted  custom seccomp policy adjustment"
        return None

    def _namespaces(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        owners = self._owners(request)
        if not self.config.reject_namespace_adjustment or owners is None or nri.Namespace not in owners.compound:
            return None
        offenders = ", ".join(f'"{plugin}" (namespace "{namespace}")'
                              for namespace, plugin in owners.compound[nri.Namespace].owners.items())
        return f"validation error: attempted restricted namespace adjustment by plugin(s) {offenders}"

    def _sysctl(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        owners = self._owners(request)
        if not self.config.reject_sysctl_adjustment or owners is None or nri.Sysctl not in owners.compound:
            return None
        claimed = owners.compound[nri.Sysctl].owners
        offenders = [claimed[key] for key in request.adjust.linux.sysctl if key in claimed]
        if not offenders:
            return None
        return f"validation error: attempted restricted sysctl adjustment by plugin(s) {', '.join(offenders)}"

    def _required_plugins(self, request: nri.ValidateContainerAdjustmentRequest) -> str | None:
        container = request.container.name
        required = list(self.config.required_plugins)
        tolerate_key = self.config.tolerate_missing_plugins_annotation
        if tolerate_key:
            value = _effective_annotation(request.pod, tolerate_key, container)
            if value is not None:
                try:
                    if _parse_bool(value):
                        return None
                except ValueError as error:
                    return f'invalid {tolerate_key} annotation "{value}": {error}'
        value = _effective_annotation(request.pod, REQUIRED_PLUGINS_ANNOTATION, container)
        if value is not None:
            annotated = _yaml_list(value)
            if annotated is None:
                return f'invalid {REQUIRED_PLUGINS_ANNOTATION} annotation "{value}": not a list of names'
            required += annotated
        present = {plugin.name for plugin in request.plugins} | \
                  {f"{plugin.index}-{plugin.name}" for plugin in request.plugins}
        missing = [name for name in required if name not in present]
        if not missing:
            return None
        offender = f'required plugin "{missing[0]}"' if len(missing) == 1 else \
            f'required plugins "{",".join(missing)}"'
        return f"validation error: {offender} not present"
