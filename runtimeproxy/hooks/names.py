"""koordinator's runtime hook points by name: the one list every part of the proxy uses.

Plugin configs (`runtime-hooks`), toggles, the dispatcher's hook points, status and metrics all name hooks
with these strings; names given by people (configs, runtimeproxyctl) are matched without case.
"""

from __future__ import annotations

PRE_RUN_POD_SANDBOX = "PreRunPodSandbox"
PRE_CREATE_CONTAINER = "PreCreateContainer"
PRE_START_CONTAINER = "PreStartContainer"
POST_START_CONTAINER = "PostStartContainer"
PRE_UPDATE_CONTAINER_RESOURCES = "PreUpdateContainerResources"
POST_STOP_CONTAINER = "PostStopContainer"
POST_STOP_POD_SANDBOX = "PostStopPodSandbox"

# In the order a pod's lifecycle reaches them.
HOOK_NAMES: tuple[str, ...] = (
    PRE_RUN_POD_SANDBOX,
    PRE_CREATE_CONTAINER,
    PRE_START_CONTAINER,
    POST_START_CONTAINER,
    PRE_UPDATE_CONTAINER_RESOURCES,
    POST_STOP_CONTAINER,
    POST_STOP_POD_SANDBOX,
)
# The pre-hooks: their answers change the call (the post-hooks' answers are not read).
PRE_HOOKS = frozenset({PRE_RUN_POD_SANDBOX, PRE_CREATE_CONTAINER, PRE_START_CONTAINER, PRE_UPDATE_CONTAINER_RESOURCES})
_HOOKS_BY_FOLDED_NAME = {hook.casefold(): hook for hook in HOOK_NAMES}


def hook_named(name: str) -> str | None:
    """The hook a person's spelling names ("prerunpodsandbox" -> "PreRunPodSandbox"), or None."""
    return _HOOKS_BY_FOLDED_NAME.get(name.casefold())
