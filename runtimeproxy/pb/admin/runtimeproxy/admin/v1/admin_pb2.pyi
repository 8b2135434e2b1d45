from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "uptime_seconds", "backends", "plugins", "store", "toggles", "plugin_config_dir", "plugin_config_dir_problem", "listen_endpoint", "backend_mode", "admin_endpoint", "state_dir", "metrics_address", "nri_plugins", "nri_endpoint")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    TOGGLES_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_CONFIG_DIR_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_CONFIG_DIR_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    LISTEN_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_MODE_FIELD_NUMBER: _ClassVar[int]
    ADMIN_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NRI_PLUGINS_FIELD_NUMBER: _ClassVar[int]
    NRI_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    version: str
    uptime_seconds: float
    backends: _containers.RepeatedCompositeFieldContainer[BackendStatus]
    plugins: _containers.RepeatedCompositeFieldContainer[PluginStatus]
    store: StoreStatus
    toggles: _containers.RepeatedCompositeFieldContainer[Toggle]
    plugin_config_dir: str
    plugin_config_dir_problem: str
    listen_endpoint: str
    backend_mode: str
    admin_endpoint: str
    state_dir: str
    metrics_address: str
    nri_plugins: _containers.RepeatedCompositeFieldContainer[NriPluginStatus]
    nri_endpoint: str
    def __init__(self, version: _Optional[str] = ..., uptime_seconds: _Optional[float] = ..., backends: _Optional[_Iterable[_Union[BackendStatus, _Mapping]]] = ..., plugins: _Optional[_Iterable[_Union[PluginStatus, _Mapping]]] = ..., store: _Optional[_Union[StoreStatus, _Mapping]] = ..., toggles: _Optional[_Iterable[_Union[Toggle, _Mapping]]] = ..., plugin_config_dir: _Optional[str] = ..., plugin_config_dir_problem: _Optional[str] = ..., listen_endpoint: _Optional[str] = ..., backend_mode: _Optional[str] = ..., admin_endpoint: _Optional[str] = ..., state_dir: _Optional[str] = ..., metrics_address: _Optional[str] = ..., nri_plugins: _Optional[_Iterable[_Union[NriPluginStatus, _Mapping]]] = ..., nri_endpoint: _Optional[str] = ...) -> None: ...

class NriPluginStatus(_message.Message):
    __slots__ = ("name", "toggle_name", "kind", "events", "connected_since_unix_seconds", "nri_version", "enabled", "disabled_reason", "event_stats")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOGGLE_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NRI_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_STATS_FIELD_NUMBER: _ClassVar[int]
    name: str
    toggle_name: str
    kind: str
    events: _containers.RepeatedScalarFieldContainer[str]
    connected_since_unix_seconds: float
    nri_version: str
    enabled: bool
    disabled_reason: str
    event_stats: _containers.RepeatedCompositeFieldContainer[HookStats]
    def __init__(self, name: _Optional[str] = ..., toggle_name: _Optional[str] = ..., kind: _Optional[str] = ..., events: _Optional[_Iterable[str]] = ..., connected_since_unix_seconds: _Optional[float] = ..., nri_version: _Optional[str] = ..., enabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ..., event_stats: _Optional[_Iterable[_Union[HookStats, _Mapping]]] = ...) -> None: ...

class BackendStatus(_message.Message):
    __slots__ = ("role", "endpoint", "reachable", "runtime_name", "runtime_version")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    role: str
    endpoint: str
    reachable: bool
    runtime_name: str
    runtime_version: str
    def __init__(self, role: _Optional[str] = ..., endpoint: _Optional[str] = ..., reachable: _Optional[bool] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ...) -> None: ...

class PluginStatus(_message.Message):
    __slots__ = ("file", "endpoint", "failure_policy", "timeout_seconds", "hooks", "enabled", "disabled_reason", "config_problem", "hook_stats", "config_warnings")
    FILE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    HOOK_STATS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_WARNINGS_FIELD_NUMBER: _ClassVar[int]
    file: str
    endpoint: str
    failure_policy: str
    timeout_seconds: float
    hooks: _containers.RepeatedScalarFieldContainer[str]
    enabled: bool
    disabled_reason: str
    config_problem: str
    hook_stats: _containers.RepeatedCompositeFieldContainer[HookStats]
    config_warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, file: _Optional[str] = ..., endpoint: _Optional[str] = ..., failure_policy: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., hooks: _Optional[_Iterable[str]] = ..., enabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ..., config_problem: _Optional[str] = ..., hook_stats: _Optional[_Iterable[_Union[HookStats, _Mapping]]] = ..., config_warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class HookStats(_message.Message):
    __slots__ = ("hook", "enabled", "calls", "failures", "last_error", "last_error_unix_seconds", "p50_seconds", "p99_seconds")
    HOOK_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    P50_SECONDS_FIELD_NUMBER: _ClassVar[int]
    P99_SECONDS_FIELD_NUMBER: _ClassVar[int]
    hook: str
    enabled: bool
    calls: int
    failures: int
    last_error: str
    last_error_unix_seconds: float
    p50_seconds: float
    p99_seconds: float
    def __init__(self, hook: _Optional[str] = ..., enabled: _Optional[bool] = ..., calls: _Optional[int] = ..., failures: _Optional[int] = ..., last_error: _Optional[str] = ..., last_error_unix_seconds: _Optional[float] = ..., p50_seconds: _Optional[float] = ..., p99_seconds: _Optional[float] = ...) -> None: ...

class StoreStatus(_message.Message):
    __slots__ = ("pods", "containers")
    PODS_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    pods: int
    containers: int
    def __init__(self, pods: _Optional[int] = ..., containers: _Optional[int] = ...) -> None: ...

class Toggle(_message.Message):
    __slots__ = ("plugin", "hooks", "reason", "since_unix_seconds", "author", "staged", "except_hooks")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    EXCEPT_HOOKS_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    hooks: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    since_unix_seconds: float
    author: str
    staged: bool
    except_hooks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plugin: _Optional[str] = ..., hooks: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., since_unix_seconds: _Optional[float] = ..., author: _Optional[str] = ..., staged: _Optional[bool] = ..., except_hooks: _Optional[_Iterable[str]] = ...) -> None: ...

class ToggleRequest(_message.Message):
    __slots__ = ("plugin", "hooks", "all", "reason", "stage", "author")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    HOOKS_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    hooks: _containers.RepeatedScalarFieldContainer[str]
    all: bool
    reason: str
    stage: bool
    author: str
    def __init__(self, plugin: _Optional[str] = ..., hooks: _Optional[_Iterable[str]] = ..., all: _Optional[bool] = ..., reason: _Optional[str] = ..., stage: _Optional[bool] = ..., author: _Optional[str] = ...) -> None: ...

class ToggleResponse(_message.Message):
    __slots__ = ("toggles", "notes")
    TOGGLES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    toggles: _containers.RepeatedCompositeFieldContainer[Toggle]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, toggles: _Optional[_Iterable[_Union[Toggle, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...
