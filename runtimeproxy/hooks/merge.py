"""The merge rules of the hook protocol, in one place for both frontends.

What a plugin's answer changes in a hook request (koordlet's semantics: it echoes the
request back and edits fields), and what a resource update leaves of a container's resources and what it
changes, over the core's model (hooks.model.Resources). No CRI, no Docker, no transport.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import fields, replace

from runtimeproxy.hooks.model import HugepageLimit, Resources

from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def replace_map(target: MutableMapping[str, str], source: Mapping[str, str]) -> None:
    target.clear()
    target.update(source)


# --- merge rules: a plugin response folded into the hook request ------------------------


# --- swap: memory_swap_limit_in_bytes is memory + swap (cgroup v1 memory.memsw.limit_in_bytes) --------
#
# What the kubelet sends on cgroup v1 (NoSwap, the only behaviour there since 1.28; before, with the NodeSwap
# gate): swap = memory limit, "no swap"; UnlimitedSwap (1.22-1.27): -1; without the gate before 1.28: 0, unset,
# and containerd then sets swap = memory itself. cri-dockerd always sends MemorySwap = Memory. The runtimes refuse
# swap < memory: runc fails StartContainer (memory.memsw.limit_in_bytes: invalid argument), dockerd the create.

SWAP_UNSET = 0  # containerd: swap = memory limit; dockerd: 2 x memory limit
SWAP_UNLIMITED = -1


def swap_following_memory(memory: int, swap: int, new_memory: int) -> int:
    """The swap limit that keeps the request's meaning when its memory limit becomes `new_memory`.

    The swap allowance (swap - memory) is kept: "no swap" (swap == memory) stays no swap, a real allowance
    stays the same size. An unset (0) or unlimited (-1) swap limit stays so, and so does one that had no
    meaning to keep (no memory limit, or already below the memory limit).
    """
    if swap <= 0 or memory <= 0 or swap < memory or new_memory <= 0:
        return swap
    return swap + (new_memory - memory)


def plugin_set_swap(request: hooks.LinuxContainerResources, answer: hooks.LinuxContainerResources) -> bool:
    """A plugin sets swap by answering a positive value other than the request's (an echo is no choice)."""
    swap = answer.memory_swap_limit_in_bytes
    return swap > 0 and swap != request.memory_swap_limit_in_bytes


def merged_memory_and_swap(
    request: hooks.LinuxContainerResources, answer: hooks.LinuxContainerResources
) -> tuple[int, int]:
    """Memory and swap limits once `answer` is merged into `request`: a positive memory limit is taken;
    swap is the plugin's if it set it, else it follows the new memory limit (swap_following_memory)."""
    memory = answer.memory_limit_in_bytes if answer.memory_limit_in_bytes > 0 else request.memory_limit_in_bytes
    if plugin_set_swap(request, answer):
        return memory, answer.memory_swap_limit_in_bytes
    return memory, swap_following_memory(
        request.memory_limit_in_bytes, request.memory_swap_limit_in_bytes, memory)


def merge_resources(
    into: hooks.LinuxContainerResources, update: hooks.LinuxContainerResources
) -> None:
    """koordlet echoes the whole request back and edits fields; these are its semantics, plus
    swap following a new memory limit (koordlet raises memory and echoes the old swap)."""
    into.memory_limit_in_bytes, into.memory_swap_limit_in_bytes = merged_memory_and_swap(into, update)
    for name in ("cpu_period", "cpu_shares"):
        value = getattr(update, name)
        if value > 0:
            setattr(into, name, value)
    if update.cpu_quota != 0:
        into.cpu_quota = update.cpu_quota
    into.oom_score_adj = update.oom_score_adj
    into.cpuset_cpus = update.cpuset_cpus
    into.cpuset_mems = update.cpuset_mems
    into.unified.update(update.unified)
    # hugepage_limits: always the request's.


def _merge_map(into: MutableMapping[str, str], update: Mapping[str, str]) -> None:
    into.update(update)  # response keys win; nothing is deleted


def merged_envs(current: Mapping[str, str], update: Mapping[str, str]) -> dict[str, str]:
    """A non-empty env map replaces the set: known names keep their order, new ones follow."""
    if not update:
        return dict(current)
    kept = {name: update[name] for name in current if name in update}
    kept.update((name, update[name]) for name in sorted(update) if name not in current)
    return kept


def ordered_env_names(envs: Mapping[str, str], env_order: list[str]) -> list[str]:
    """The names of the merged envs in the order to write them back: the original order, then new
    names sorted. A name listed twice originally appears once (its last value is what runtimes use)."""
    ordered = [name for name in dict.fromkeys(env_order) if name in envs]
    original = set(env_order)
    return ordered + sorted(name for name in envs if name not in original)


def merge_pod_response(
    request: hooks.PodSandboxHookRequest, response: hooks.PodSandboxHookResponse
) -> hooks.PodSandboxHookRequest:
    merged = hooks.PodSandboxHookRequest()
    merged.CopyFrom(request)
    _merge_map(merged.labels, response.labels)
    _merge_map(merged.annotations, response.annotations)
    if response.cgroup_parent:
        merged.cgroup_parent = response.cgroup_parent
    if response.HasField("resources"):
        merge_resources(merged.resources, response.resources)
    return merged


def merge_container_response(
    request: hooks.ContainerResourceHookRequest, response: hooks.ContainerResourceHookResponse
) -> hooks.ContainerResourceHookRequest:
    merged = hooks.ContainerResourceHookRequest()
    merged.CopyFrom(request)
    _merge_map(merged.container_annotations, response.container_annotations)
    if response.HasField("container_resources"):
        merge_resources(merged.container_resources, response.container_resources)
    if response.pod_cgroup_parent:
        merged.pod_cgroup_parent = response.pod_cgroup_parent
    if response.container_envs:
        envs = merged_envs(request.container_envs, response.container_envs)
        merged.ClearField("container_envs")
        merged.container_envs.update(envs)
    return merged


# --- what an UpdateContainerResources leaves -------------------------------------------------

_UPDATED_WHEN_NONZERO = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes",
                         "cpuset_cpus", "cpuset_mems")


def apply_resource_update(current: Resources | None, update: Resources) -> Resources:
    """The container's resources after containerd applied `update` to `current` (None: none recorded).

    containerd 1.6 (CRI UpdateContainerResources -> opts.WithResources on the container's spec)
    applies field by field, zero or empty meaning "unchanged": CPU period, quota and shares,
    memory limit and cpusets when non-zero; swap when non-zero, and a new memory limit without
    swap sets swap = that limit, whatever swap was (containerd 1.6.20 on cgroup v1: an allowance or
    -1 is lost too); unified keys merged; hugepage limits added per page size. oom_score_adj is
    never updated (it belongs to the process, set at creation). dockerd keeps swap on a memory-only
    update (and refuses memory above it), but cri-dockerd always sends MemorySwap with Memory.
    """
    current = current or Resources()
    settings: dict[str, object] = {name: getattr(update, name) for name in _UPDATED_WHEN_NONZERO
                                   if getattr(update, name)}
    if update.memory_swap_limit_in_bytes:
        settings["memory_swap_limit_in_bytes"] = update.memory_swap_limit_in_bytes
    elif update.memory_limit_in_bytes:
        settings["memory_swap_limit_in_bytes"] = update.memory_limit_in_bytes
    pages = {limit.page_size: limit.limit for limit in current.hugepage_limits}
    pages.update((limit.page_size, limit.limit) for limit in update.hugepage_limits)
    return replace(current, **settings, unified={**current.unified, **update.unified},  # type: ignore[arg-type]
                   hugepage_limits=tuple(HugepageLimit(size, limit) for size, limit in pages.items()))


# The resources' single values (all but the hugepage limits and the unified keys), by the model's names.
RESOURCE_SCALARS = tuple(f.name for f in fields(Resources) if f.name not in ("hugepage_limits", "unified"))


def changed_resources(before: Resources | None, after: Resources | None, with_hugepages: bool = False) -> Resources:
    """Only the resources `after` changes over `before`, as a sparse update: a zero or empty value is never
    included (to the runtimes it means "unchanged": it cannot clear a field). Hugepage limits only when asked
    (a hook answer's are not taken: the merge keeps the request's)."""
    before, after = before or Resources(), after or Resources()
    settings = {name: getattr(after, name) for name in RESOURCE_SCALARS
                if getattr(after, name) and getattr(after, name) != getattr(before, name)}
    unified = {key: value for key, value in after.unified.items() if before.unified.get(key) != value}
    pages: tuple[HugepageLimit, ...] = ()
    if with_hugepages:
        before_pages = {limit.page_size: limit.limit for limit in before.hugepage_limits}
        pages = tuple(limit for limit in after.hugepage_limits if before_pages.get(limit.page_size) != limit.limit)
    return Resources(**settings, unified=unified, hugepage_limits=pages)


def is_empty(resources: Resources) -> bool:
    """A sparse update that changes nothing."""
    return resources == Resources()
