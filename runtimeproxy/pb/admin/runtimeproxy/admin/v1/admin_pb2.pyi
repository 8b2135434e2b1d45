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
    __slots__ = ("version", "uptime_seconds", "backends", "plugins", "store", "toggles", "plugin_config_dir", "plugin_config_dir_problem", "listen_endpoint", "backend_mode", "admin_endpoint", "state_dir", "metrics_address", "nri_plugins", "nri_endpoint", "shadow_settings", "missed_plugins", "reconciliation")
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
    SHADOW_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    MISSED_PLUGINS_FIELD_NUMBER: _ClassVar[int]
    RECONCILIATION_FIELD_NUMBER: _ClassVar[int]
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
    shadow_settings: _containers.RepeatedCompositeFieldContainer[ShadowSetting]
    missed_plugins: MissedPlugins
    reconciliation: Reconciliation
    def __init__(self, version: _Optional[str] = ..., uptime_seconds: _Optional[float] = ..., backends: _Optional[_Iterable[_Union[BackendStatus, _Mapping]]] = ..., plugins: _Optional[_Iterable[_Union[PluginStatus, _Mapping]]] = ..., store: _Optional[_Union[StoreStatus, _Mapping]] = ..., toggles: _Optional[_Iterable[_Union[Toggle, _Mapping]]] = ..., plugin_config_dir: _Optional[str] = ..., plugin_config_dir_problem: _Optional[str] = ..., listen_endpoint: _Optional[str] = ..., backend_mode: _Optional[str] = ..., admin_endpoint: _Optional[str] = ..., state_dir: _Optional[str] = ..., metrics_address: _Optional[str] = ..., nri_plugins: _Optional[_Iterable[_Union[NriPluginStatus, _Mapping]]] = ..., nri_endpoint: _Optional[str] = ..., shadow_settings: _Optional[_Iterable[_Union[ShadowSetting, _Mapping]]] = ..., missed_plugins: _Optional[_Union[MissedPlugins, _Mapping]] = ..., reconciliation: _Optional[_Union[Reconciliation, _Mapping]] = ...) -> None: ...

class MissedPlugins(_message.Message):
    __slots__ = ("count", "newest")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIELD_NUMBER: _ClassVar[int]
    count: int
    newest: _containers.RepeatedCompositeFieldContainer[MissedPlugin]
    def __init__(self, count: _Optional[int] = ..., newest: _Optional[_Iterable[_Union[MissedPlugin, _Mapping]]] = ...) -> None: ...

class MissedPlugin(_message.Message):
    __slots__ = ("id", "pod", "container", "hook", "plugins", "unix_seconds")
    ID_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    pod: str
    container: str
    hook: str
    plugins: _containers.RepeatedScalarFieldContainer[str]
    unix_seconds: float
    def __init__(self, id: _Optional[str] = ..., pod: _Optional[str] = ..., container: _Optional[str] = ..., hook: _Optional[str] = ..., plugins: _Optional[_Iterable[str]] = ..., unix_seconds: _Optional[float] = ...) -> None: ...

class Reconciliation(_message.Message):
    __slots__ = ("interrupted_calls", "removed", "post_started", "left", "not_found", "done", "journal_problem")
    INTERRUPTED_CALLS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    POST_STARTED_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_PROBLEM_FIELD_NUMBER: _ClassVar[int]
    interrupted_calls: int
    removed: int
    post_started: int
    left: int
    not_found: int
    done: bool
    journal_problem: str
    def __init__(self, interrupted_calls: _Optional[int] = ..., removed: _Optional[int] = ..., post_started: _Optional[int] = ..., left: _Optional[int] = ..., not_found: _Optional[int] = ..., done: _Optional[bool] = ..., journal_problem: _Optional[str] = ...) -> None: ...

class NriPluginStatus(_message.Message):
    __slots__ = ("name", "toggle_name", "kind", "events", "connected_since_unix_seconds", "nri_version", "enabled", "disabled_reason", "event_stats", "shadow")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOGGLE_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NRI_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_STATS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    toggle_name: str
    kind: str
    events: _containers.RepeatedScalarFieldContainer[str]
    connected_since_unix_seconds: float
    nri_version: str
    enabled: bool
    disabled_reason: str
    event_stats: _containers.RepeatedCompositeFieldContainer[HookStats]
    shadow: bool
    def __init__(self, name: _Optional[str] = ..., toggle_name: _Optional[str] = ..., kind: _Optional[str] = ..., events: _Optional[_Iterable[str]] = ..., connected_since_unix_seconds: _Optional[float] = ..., nri_version: _Optional[str] = ..., enabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ..., event_stats: _Optional[_Iterable[_Union[HookStats, _Mapping]]] = ..., shadow: _Optional[bool] = ...) -> None: ...

class BackendStatus(_message.Message):
    __slots__ = ("role", "endpoint", "reachable", "runtime_name", "runtime_version", "problem")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    role: str
    endpoint: str
    reachable: bool
    runtime_name: str
    runtime_version: str
    problem: str
    def __init__(self, role: _Optional[str] = ..., endpoint: _Optional[str] = ..., reachable: _Optional[bool] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., problem: _Optional[str] = ...) -> None: ...

class PluginStatus(_message.Message):
    __slots__ = ("file", "endpoint", "failure_policy", "timeout_seconds", "hooks", "enabled", "disabled_reason", "config_problem", "hook_stats", "config_warnings", "shadow", "shadow_setting", "endpoint_problem")
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
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    SHADOW_SETTING_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_PROBLEM_FIELD_NUMBER: _ClassVar[int]
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
    shadow: bool
    shadow_setting: str
    endpoint_problem: str
    def __init__(self, file: _Optional[str] = ..., endpoint: _Optional[str] = ..., failure_policy: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., hooks: _Optional[_Iterable[str]] = ..., enabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ..., config_problem: _Optional[str] = ..., hook_stats: _Optional[_Iterable[_Union[HookStats, _Mapping]]] = ..., config_warnings: _Optional[_Iterable[str]] = ..., shadow: _Optional[bool] = ..., shadow_setting: _Optional[str] = ..., endpoint_problem: _Optional[str] = ...) -> None: ...

class HookStats(_message.Message):
    __slots__ = ("hook", "enabled", "calls", "failures", "last_error", "last_error_unix_seconds", "p50_seconds", "p99_seconds", "shadow_changes", "shadow_disagreements")
    HOOK_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    P50_SECONDS_FIELD_NUMBER: _ClassVar[int]
    P99_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_CHANGES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_DISAGREEMENTS_FIELD_NUMBER: _ClassVar[int]
    hook: str
    enabled: bool
    calls: int
    failures: int
    last_error: str
    last_error_unix_seconds: float
    p50_seconds: float
    p99_seconds: float
    shadow_changes: int
    shadow_disagreements: int
    def __init__(self, hook: _Optional[str] = ..., enabled: _Optional[bool] = ..., calls: _Optional[int] = ..., failures: _Optional[int] = ..., last_error: _Optional[str] = ..., last_error_unix_seconds: _Optional[float] = ..., p50_seconds: _Optional[float] = ..., p99_seconds: _Optional[float] = ..., shadow_changes: _Optional[int] = ..., shadow_disagreements: _Optional[int] = ...) -> None: ...

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

class TraceRequest(_message.Message):
    __slots__ = ("pod",)
    POD_FIELD_NUMBER: _ClassVar[int]
    pod: str
    def __init__(self, pod: _Optional[str] = ...) -> None: ...

class TraceResponse(_message.Message):
    __slots__ = ("pod_uid", "pod_namespace", "pod_name", "sandbox_ids", "containers", "entries", "dropped_entries", "entries_per_pod")
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_PER_POD_FIELD_NUMBER: _ClassVar[int]
    pod_uid: str
    pod_namespace: str
    pod_name: str
    sandbox_ids: _containers.RepeatedScalarFieldContainer[str]
    containers: _containers.RepeatedCompositeFieldContainer[TracedContainer]
    entries: _containers.RepeatedCompositeFieldContainer[TraceEntry]
    dropped_entries: int
    entries_per_pod: int
    def __init__(self, pod_uid: _Optional[str] = ..., pod_namespace: _Optional[str] = ..., pod_name: _Optional[str] = ..., sandbox_ids: _Optional[_Iterable[str]] = ..., containers: _Optional[_Iterable[_Union[TracedContainer, _Mapping]]] = ..., entries: _Optional[_Iterable[_Union[TraceEntry, _Mapping]]] = ..., dropped_entries: _Optional[int] = ..., entries_per_pod: _Optional[int] = ...) -> None: ...

class TracedContainer(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TraceEntry(_message.Message):
    __slots__ = ("unix_seconds", "hook", "target", "request", "steps", "collisions", "result", "sent_changes")
    UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    COLLISIONS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SENT_CHANGES_FIELD_NUMBER: _ClassVar[int]
    unix_seconds: float
    hook: str
    target: str
    request: str
    steps: _containers.RepeatedCompositeFieldContainer[TraceStep]
    collisions: _containers.RepeatedCompositeFieldContainer[Collision]
    result: str
    sent_changes: _containers.RepeatedCompositeFieldContainer[FieldChange]
    def __init__(self, unix_seconds: _Optional[float] = ..., hook: _Optional[str] = ..., target: _Optional[str] = ..., request: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[TraceStep, _Mapping]]] = ..., collisions: _Optional[_Iterable[_Union[Collision, _Mapping]]] = ..., result: _Optional[str] = ..., sent_changes: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ...) -> None: ...

class TraceStep(_message.Message):
    __slots__ = ("plugin", "outcome", "shadow", "code", "details", "latency_seconds", "changes", "disagreements")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    DISAGREEMENTS_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    outcome: str
    shadow: bool
    code: str
    details: str
    latency_seconds: float
    changes: _containers.RepeatedCompositeFieldContainer[FieldChange]
    disagreements: _containers.RepeatedCompositeFieldContainer[FieldChange]
    def __init__(self, plugin: _Optional[str] = ..., outcome: _Optional[str] = ..., shadow: _Optional[bool] = ..., code: _Optional[str] = ..., details: _Optional[str] = ..., latency_seconds: _Optional[float] = ..., changes: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ..., disagreements: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ...) -> None: ...

class FieldChange(_message.Message):
    __slots__ = ("field", "before", "after")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    field: str
    before: str
    after: str
    def __init__(self, field: _Optional[str] = ..., before: _Optional[str] = ..., after: _Optional[str] = ...) -> None: ...

class Collision(_message.Message):
    __slots__ = ("field", "earlier_plugin", "earlier_value", "later_plugin", "later_value")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EARLIER_PLUGIN_FIELD_NUMBER: _ClassVar[int]
    EARLIER_VALUE_FIELD_NUMBER: _ClassVar[int]
    LATER_PLUGIN_FIELD_NUMBER: _ClassVar[int]
    LATER_VALUE_FIELD_NUMBER: _ClassVar[int]
    field: str
    earlier_plugin: str
    earlier_value: str
    later_plugin: str
    later_value: str
    def __init__(self, field: _Optional[str] = ..., earlier_plugin: _Optional[str] = ..., earlier_value: _Optional[str] = ..., later_plugin: _Optional[str] = ..., later_value: _Optional[str] = ...) -> None: ...

class ShadowRequest(_message.Message):
    __slots__ = ("plugin", "author", "stage")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    author: str
    stage: bool
    def __init__(self, plugin: _Optional[str] = ..., author: _Optional[str] = ..., stage: _Optional[bool] = ...) -> None: ...

class ShadowResponse(_message.Message):
    __slots__ = ("settings", "notes")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    settings: _containers.RepeatedCompositeFieldContainer[ShadowSetting]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, settings: _Optional[_Iterable[_Union[ShadowSetting, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class ShadowSetting(_message.Message):
    __slots__ = ("plugin", "shadow", "since_unix_seconds", "author", "staged")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    shadow: bool
    since_unix_seconds: float
    author: str
    staged: bool
    def __init__(self, plugin: _Optional[str] = ..., shadow: _Optional[bool] = ..., since_unix_seconds: _Optional[float] = ..., author: _Optional[str] = ..., staged: _Optional[bool] = ...) -> None: ...
