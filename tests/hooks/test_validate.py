"""hooks.validate: each rule on its own, then whole answers (only what they would change is checked)."""

from __future__ import annotations

import pytest

from runtimeproxy.hooks import validate
from runtimeproxy.hooks.validate import PLUGIN_TEXT_MAX_CHARS, Problem, answer_problem, printable
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

KUBEPODS = "/kubepods/burstable/pod-u-1"
KUBEPODS_SYSTEMD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu1.slice"


# --- cgroup parents ----------------------------------------------------------------------------


@pytest.mark.parametrize("value, current", [
    ("/kubepods/besteffort/pod-u-1", KUBEPODS),  # another QoS tier
    ("/kubepods/burstable/pod-u-1/koord", KUBEPODS),
    ("/kubepods", KUBEPODS),
    ("kubepods-besteffort-podu1.slice", KUBEPODS_SYSTEMD),
    ("/kubepods.slice/kubepods-besteffort.slice", KUBEPODS_SYSTEMD),
    ("kubepods.slice", "kubepods-burstable.slice"),
    ("/anywhere/at/all", ""),  # the pod had no parent: nothing to stay within
    ("my-own.slice", ""),
])
def test_good_cgroup_parents(value: str, current: str) -> None:
    assert validate.cgroup_parent_problem(value, current) is None


@pytest.mark.parametrize("value, current, why", [
    ("../../../../escape", KUBEPODS, "neither an absolute path nor a systemd slice name"),
    ("escape", KUBEPODS, "neither an absolute path nor a systemd slice name"),
    ("/kubepods/../escape", KUBEPODS, "not a clean path"),
    ("/kubepods//pod", KUBEPODS, "not a clean path"),
    ("/kubepods/./pod", KUBEPODS, "not a clean path"),
    ("/kubepods/pod/", KUBEPODS, "not a clean path"),
    ("/", "", "root cgroup"),
    ("/kube\0pods", KUBEPODS, "NUL"),
    ("/kubepods/" + "x" * 256, KUBEPODS, "longer than 255 bytes"),
    ("/escape", KUBEPODS, 'outside "kubepods"'),
    ("/kubepods-x/pod", KUBEPODS, 'outside "kubepods"'),
    ("system-escape.slice", KUBEPODS_SYSTEMD, 'outside "kubepods"'),
    ("-.slice", KUBEPODS_SYSTEMD, "not a systemd slice name"),
    ("kubepods--x.slice", KUBEPODS_SYSTEMD, "not a systemd slice name"),
    ("kubepods-.slice", KUBEPODS_SYSTEMD, "not a systemd slice name"),
    ("kubepods-burstable.slice:cri-containerd:abc", KUBEPODS_SYSTEMD, "slice:prefix:name"),
    ("/kubepods/burstable", KUBEPODS_SYSTEMD, "different cgroup drivers"),
    ("kubepods-besteffort.slice", KUBEPODS, "different cgroup drivers"),
])
def test_bad_cgroup_parents(value: str, current: str, why: str) -> None:
    problem = validate.cgroup_parent_problem(value, current)
    assert problem is not None and why in problem


def test_cgroup_hierarchy_of_both_drivers() -> None:
    assert validate.cgroup_hierarchy(KUBEPODS) == "kubepods"
    assert validate.cgroup_hierarchy(KUBEPODS_SYSTEMD) == "kubepods"
    assert validate.cgroup_hierarchy("kubepods-besteffort-pod1.slice") == "kubepods"
    assert validate.cgroup_hierarchy("/runtimeproxy-e2e") == "runtimeproxy-e2e"


# --- cpusets, numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "0", "0-3", "0-3,8,10-11", "7,2", "5-5"])
def test_good_cpu_lists(value: str) -> None:
    assert validate.cpu_list_problem(value) is None


@pytest.mark.parametrize("value, why", [
    ("abc", "not a cpu list"), ("0-", "not a cpu list"), ("0,,1", "not a cpu list"), (" 0", "not a cpu list"),
    ("0-3,", "not a cpu list"), ("-1", "not a cpu list"), ("3-1", "descending range 3-1"),
    ("0-3,9-8", "descending range 9-8"),
])
def test_bad_cpu_lists(value: str, why: str) -> None:
    problem = validate.cpu_list_problem(value)
    assert problem is not None and why in problem


@pytest.mark.parametrize("rule, good, bad", [
    (validate.oom_score_adj_problem, [-1000, 0, 1000], [-1001, 1001, 99999]),
    (validate.cpu_period_problem, [1000, 100_000, 1_000_000], [999, 1_000_001]),
    (validate.cpu_quota_problem, [-1, 1000, 10**9], [-2, 1, 999]),
    (validate.cpu_shares_problem, [2, 1024, 262_144], [1, 262_145]),
])
def test_numeric_ranges(rule, good: list[int], bad: list[int]) -> None:  # type: ignore[no-untyped-def]
    assert [rule(value) for value in good] == [None] * len(good)
    assert all(rule(value) for value in bad)


# --- names and keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("name, problem", [
    ("PATH", None), ("lower_and.dots-1", None), ("", "empty"), ("A=B", "'='"), ("A\0B", "NUL"),
])
def test_env_names(name: str, problem: str | None) -> None:
    found = validate.env_name_problem(name)
    assert found is None if problem is None else problem in found


@pytest.mark.parametrize("key", ["app", "app.kubernetes.io/name", "a", "A_b-c.d", "x" * 63,
                                 "example.runtimeproxy.koordinator.sh/hooked"])
def test_good_label_keys(key: str) -> None:
    assert validate.label_key_problem(key) is None
    assert validate.annotation_key_problem(key) is None


@pytest.mark.parametrize("key", ["", "/name", "-name", "name-", "x" * 64, "a/b/c", "bad_prefix!/name",
                                 "prefix/", "sp ace", "nul\0"])
def test_bad_label_and_annotation_keys(key: str) -> None:
    assert validate.label_key_problem(key)
    assert validate.annotation_key_problem(key)


def test_annotation_key_prefixes_are_case_insensitive_label_ones_not() -> None:
    assert validate.annotation_key_problem("Example.COM/Name") is None
    assert validate.label_key_problem("Example.COM/Name")


@pytest.mark.parametrize("key, good", [("memory.high", True), ("cpu.weight", True), ("", False), ("..", False),
                                       ("../memory.high", False), ("a\0", False)])
def test_unified_keys(key: str, good: bool) -> None:
    assert (validate.unified_key_problem(key) is None) is good


def test_long_values_are_cut_in_messages() -> None:
    assert len(validate.quoted("x" * 1000)) == 80 and validate.quoted("a\0") == '"a\\u0000"'


# --- whole answers: only what they would change -------------------------------------------------


def container_request() -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        container_resources=hooks.LinuxContainerResources(cpu_shares=2, cpuset_cpus="0-1", oom_score_adj=1000),
        container_annotations={"a": "1"}, container_envs={"KEEP": "1"}, pod_cgroup_parent=KUBEPODS,
    )


def echo(request: hooks.ContainerResourceHookRequest) -> hooks.ContainerResourceHookResponse:
    return hooks.ContainerResourceHookResponse(
        container_annotations=request.container_annotations, container_resources=request.container_resources,
        pod_cgroup_parent=request.pod_cgroup_parent, container_envs=request.container_envs)


def container_problem(**changes: object) -> Problem | None:
    request = container_request()
    response = echo(request)
    for name, value in changes.items():
        target = response
        if name.startswith("resources_"):
            target, name = response.container_resources, name.removeprefix("resources_")
        if isinstance(value, dict):
            getattr(target, name).update(value)
        else:
            setattr(target, name, value)
    return answer_problem(request, response)


def test_an_echo_is_valid_even_with_odd_kubelet_values() -> None:
    request = container_request()
    request.container_resources.cpuset_cpus = "kubelet-said-so"
    request.container_envs["=odd"] = "1"
    request.pod_cgroup_parent = "relative"
    assert answer_problem(request, echo(request)) is None


@pytest.mark.parametrize("changes, field, why", [
    ({"resources_cpuset_cpus": "abc"}, "container_resources.cpuset_cpus", '"abc" is not a cpu list'),
    ({"resources_cpuset_mems": "1-0"}, "container_resources.cpuset_mems", "descending"),
    ({"resources_oom_score_adj": 99999}, "container_resources.oom_score_adj", "99999 is outside"),
    ({"resources_cpu_shares": 300_000}, "container_resources.cpu_shares", "outside"),
    ({"resources_cpu_period": 10}, "container_resources.cpu_period", "outside"),
    ({"resources_cpu_quota": -5}, "container_resources.cpu_quota", "neither -1"),
    ({"resources_unified": {"../x": "1"}}, 'container_resources.unified["../x"]', "not a cgroup file name"),
    ({"pod_cgroup_parent": "../../../../escape"}, "pod_cgroup_parent", "neither an absolute path"),
    ({"container_envs": {"": "x"}}, 'container_envs[""]', "empty variable name"),
    ({"container_envs": {"A=B": "x"}}, 'container_envs["A=B"]', "contains '='"),
    ({"container_envs": {"OK": "a\0b"}}, 'container_envs["OK"]', "NUL"),
    ({"container_annotations": {"": "x"}}, 'container_annotations[""]', "empty key"),
    ({"container_annotations": {"a": "\0"}}, 'container_annotations["a"]', "NUL"),
])
def test_bad_container_answers_name_the_field(changes: dict, field: str, why: str) -> None:
    problem = container_problem(**changes)
    assert problem is not None and problem.field == field and why in problem.reason
    assert str(problem) == f"{field}: {problem.reason}"


@pytest.mark.parametrize("changes", [
    {"resources_memory_limit_in_bytes": -1},  # sizes <= 0 are never taken by the merge
    {"resources_memory_swap_limit_in_bytes": -5},
    {"resources_cpu_shares": -3},
    {"resources_cpu_period": 0},
    {"resources_cpuset_cpus": ""},  # empty means "keep" to the runtime
    {"resources_oom_score_adj": -1000},
    {"pod_cgroup_parent": ""},  # not taken
    {"container_envs": {"NEW": "1"}},
    {"container_annotations": {"koordinator.sh/qos": "BE"}},
])
def test_values_the_merge_ignores_or_that_are_fine_pass(changes: dict) -> None:
    assert container_problem(**changes) is None


# --- swap: memory + swap never below memory -------------------------------------------------------

MiB = 1 << 20


@pytest.mark.parametrize("memory, swap, bad", [
    (96 * MiB, 96 * MiB, False), (96 * MiB, 200 * MiB, False), (96 * MiB, 0, False), (96 * MiB, -1, False),
    (0, 64 * MiB, False), (96 * MiB, 64 * MiB, True), (96 * MiB, -5, True),
])
def test_swap_problem(memory: int, swap: int, bad: bool) -> None:
    assert (validate.swap_problem(memory, swap) is not None) is bad


def no_swap_request() -> hooks.ContainerResourceHookRequest:
    request = container_request()
    request.container_resources.memory_limit_in_bytes = 64 * MiB
    request.container_resources.memory_swap_limit_in_bytes = 64 * MiB
    return request


def test_raising_memory_and_echoing_swap_is_valid_swap_follows() -> None:
    request = no_swap_request()
    response = echo(request)
    response.container_resources.memory_limit_in_bytes = 96 * MiB
    assert answer_problem(request, response) is None


def test_a_swap_limit_the_plugin_set_below_memory_is_refused_naming_swap() -> None:
    request = no_swap_request()
    response = echo(request)
    response.container_resources.memory_limit_in_bytes = 96 * MiB
    response.container_resources.memory_swap_limit_in_bytes = 80 * MiB
    problem = answer_problem(request, response)
    assert problem is not None and problem.field == "container_resources.memory_swap_limit_in_bytes"
    assert f"would be {80 * MiB}, below the memory limit {96 * MiB}" in problem.reason


def test_memory_raised_above_a_swap_that_cannot_follow_is_refused_naming_memory() -> None:
    request = container_request()
    request.container_resources.memory_limit_in_bytes = 0  # no memory limit: a swap limit alone has no allowance
    request.container_resources.memory_swap_limit_in_bytes = 64 * MiB
    response = echo(request)
    response.container_resources.memory_limit_in_bytes = 96 * MiB
    problem = answer_problem(request, response)
    assert problem is not None and problem.field == "container_resources.memory_limit_in_bytes"


def test_a_request_already_below_memory_is_not_the_plugins_fault_when_echoed() -> None:
    request = no_swap_request()
    request.container_resources.memory_swap_limit_in_bytes = 32 * MiB
    assert answer_problem(request, echo(request)) is None


def test_pod_answers() -> None:
    request = hooks.PodSandboxHookRequest(labels={"app": "web"}, annotations={"a": "1"}, cgroup_parent=KUBEPODS,
                                          resources=hooks.LinuxContainerResources(cpu_shares=2))
    good = hooks.PodSandboxHookResponse(labels={"app": "web", "tier": "be"}, annotations={"x.io/y": "z"},
                                        cgroup_parent="/kubepods/besteffort/pod-u-1")
    assert answer_problem(request, good) is None
    cases = [
        (hooks.PodSandboxHookResponse(cgroup_parent="../../../../escape"), "cgroup_parent"),
        (hooks.PodSandboxHookResponse(labels={"": "x"}), 'labels[""]'),
        (hooks.PodSandboxHookResponse(labels={"app": "a\0"}), 'labels["app"]'),
        (hooks.PodSandboxHookResponse(annotations={"=": "x"}), 'annotations["="]'),
        (hooks.PodSandboxHookResponse(resources=hooks.LinuxContainerResources(cpuset_cpus="x")),
         "resources.cpuset_cpus"),
    ]
    for response, field in cases:
        problem = answer_problem(request, response)
        assert problem is not None and problem.field == field, (field, problem)


def test_other_messages_are_not_checked() -> None:
    assert answer_problem(hooks.PodSandboxHookRequest(), hooks.ContainerMetadata()) is None


# --- sizes: what an answer may add (issue 17) ---------------------------------------------------------

KiB = 1024
UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
OTHER_UID = "11111111-2222-3333-4444-555555555555"


def test_an_env_entry_over_max_arg_strlen_is_refused_one_under_passes() -> None:
    fits = "x" * (validate.ENV_ENTRY_MAX_BYTES - len("BIG") - 2)  # "BIG=" + value + NUL = 128 KiB
    assert container_problem(container_envs={"BIG": fits}) is None
    problem = container_problem(container_envs={"BIG": fits + "x"})
    assert problem is not None and problem.field == 'container_envs["BIG"]'
    assert "over 131072 (Linux's MAX_ARG_STRLEN: exec would fail with E2BIG)" in problem.reason


def test_annotations_may_not_grow_past_kubernetes_256_kib_per_object() -> None:
    fits = "x" * (validate.ANNOTATIONS_MAX_BYTES - map_size({"a": "1"}) - 3)
    assert container_problem(container_annotations={"big": fits}) is None
    problem = container_problem(container_annotations={"big": fits + "x"})
    assert problem is not None and problem.field == "container_annotations"
    assert f"would be {256 * KiB + 1} bytes of keys and values, over {256 * KiB}" in problem.reason


def map_size(entries: dict[str, str]) -> int:
    return validate.map_bytes(entries)


def test_a_50_mb_annotation_from_the_issue_is_refused_naming_the_map() -> None:
    request = hooks.PodSandboxHookRequest(labels={"io.kubernetes.pod.uid": UID})
    response = hooks.PodSandboxHookResponse(annotations={"big": "x" * 50_000_000})
    problem = answer_problem(request, response)
    assert problem is not None and problem.field == "annotations" and "over 262144" in problem.reason


def test_what_the_kubelet_sent_is_never_the_plugins_fault() -> None:
    request = container_request()
    request.container_annotations["huge"] = "k" * (300 * KiB)  # over every bound, from the kubelet
    request.container_envs["HUGE"] = "e" * (200 * KiB)
    assert answer_problem(request, echo(request)) is None
    response = echo(request)
    response.container_annotations["small"] = "1"  # grows an already oversized map: refused
    problem = answer_problem(request, response)
    assert problem is not None and problem.field == "container_annotations"
    response = echo(request)
    response.container_annotations["huge"] = "short"  # shrinks it: fine
    assert answer_problem(request, response) is None


def test_one_map_may_grow_by_at_most_256_kib() -> None:
    many = {f"V{i}": "x" * 1000 for i in range(300)}  # 300 entries of ~1 KB: each fine, ~294 KiB in all
    problem = container_problem(container_envs=many)
    assert problem is not None and problem.field == "container_envs"
    assert f"over {validate.ANSWER_MAP_MAX_BYTES}" in problem.reason


def test_the_whole_answer_may_add_at_most_512_kib() -> None:
    envs = {f"E{i}": "x" * 1000 for i in range(250)}
    unified = {f"x.{i}": "1" * 1000 for i in range(250)}
    annotations = {"big": "a" * (200 * KiB)}
    problem = container_problem(container_envs=envs, resources_unified=unified, container_annotations=annotations)
    assert problem is not None and problem.field == "ContainerResourceHookResponse"
    assert f"over {validate.ANSWER_MAX_ADDED_BYTES}" in problem.reason


@pytest.mark.parametrize("changes, field, why", [
    ({"resources_cpuset_cpus": ",".join(["0"] * 3000)}, "container_resources.cpuset_cpus", "one cgroup file write"),
    ({"resources_unified": {"memory.high": "9" * 5000}}, 'container_resources.unified["memory.high"]',
     "one cgroup file write"),
    ({"pod_cgroup_parent": "/kubepods" + "/x" * 2100}, "pod_cgroup_parent", "PATH_MAX"),
])
def test_cgroup_values_fit_what_the_kernel_takes(changes: dict, field: str, why: str) -> None:
    problem = container_problem(**changes)
    assert problem is not None and problem.field == field and why in problem.reason


def test_label_values_are_at_most_63_characters_any_charset() -> None:
    request = hooks.PodSandboxHookRequest(labels={"app": "web"})
    assert answer_problem(request, hooks.PodSandboxHookResponse(labels={"path": "/kubepods/x y"})) is None
    assert answer_problem(request, hooks.PodSandboxHookResponse(labels={"v": "x" * 63})) is None
    problem = answer_problem(request, hooks.PodSandboxHookResponse(labels={"v": "x" * 64}))
    assert problem is not None and problem.field == 'labels["v"]' and "64 characters, over 63" in problem.reason


# --- identity: the kubelet's keys, another pod's cgroup (issue 17) -------------------------------------


def kubelet_pod_request() -> hooks.PodSandboxHookRequest:
    return hooks.PodSandboxHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name="web", namespace="ns", uid=UID),
        labels={"app": "web", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns",
                "io.kubernetes.pod.uid": UID},
        cgroup_parent=f"/kubepods/burstable/pod{UID}")


def test_an_echo_of_the_kubelets_keys_passes() -> None:
    request = kubelet_pod_request()
    response = hooks.PodSandboxHookResponse(labels=request.labels, annotations=request.annotations,
                                            cgroup_parent=request.cgroup_parent)
    assert answer_problem(request, response) is None
    assert answer_problem(request, hooks.PodSandboxHookResponse(labels={"koordinator.sh/qos": "LS"})) is None


@pytest.mark.parametrize("labels, why", [
    ({"io.kubernetes.pod.uid": OTHER_UID}, f'may echo "{UID}", not change it (an answer for another pod'),
    ({"io.kubernetes.pod.name": "other"}, "not change it"),
    ({"io.kubernetes.docker.type": "container"}, "not a plugin's to add"),
])
def test_the_kubelets_labels_are_not_a_plugins_to_change(labels: dict, why: str) -> None:
    problem = answer_problem(kubelet_pod_request(), hooks.PodSandboxHookResponse(labels=labels))
    key = next(iter(labels))
    assert problem is not None and problem.field == f'labels["{key}"]' and why in problem.reason


def test_the_kubelets_container_annotations_are_not_a_plugins_to_change() -> None:
    request = container_request()
    request.container_annotations.update({"io.kubernetes.container.hash": "abc", "io.kubernetes.container.restartCount": "0"})
    for key, value in [("io.kubernetes.container.hash", "def"), ("io.kubernetes.container.restartCount", "7"),
                       ("io.kubernetes.container.terminationMessagePath", "/x")]:
        response = echo(request)
        response.container_annotations[key] = value
        problem = answer_problem(request, response)
        assert problem is not None and problem.field == f'container_annotations["{key}"]', key


@pytest.mark.parametrize("parent, bad", [
    (f"/kubepods/besteffort/pod{UID}", False),  # this pod in another QoS tier
    ("/kubepods/koord-be", False),  # a resource manager's own tree, no pod named
    (f"/kubepods/burstable/pod{OTHER_UID}", True),
    (f"/kubepods/pod{OTHER_UID.replace('-', '')}", True),  # a static pod's uid form
    (f"/kubepods/burstable/pod{UID}/../pod{OTHER_UID}", True),
])
def test_a_cgroup_parent_naming_another_pod_is_refused(parent: str, bad: bool) -> None:
    problem = validate.cgroup_parent_problem(parent, f"/kubepods/burstable/pod{UID}", UID)
    assert (problem is not None) is bad, problem
    if bad and ".." not in parent:
        assert "the cgroup of another pod" in problem


def test_systemd_pod_slices_name_uids_with_underscores() -> None:
    ours = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    other = f"kubepods-besteffort-pod{OTHER_UID.replace('-', '_')}.slice"
    assert validate.pod_uids_in_cgroup(f"/kubepods.slice/kubepods-burstable.slice/{ours}") == {UID.replace("-", "")}
    assert validate.cgroup_parent_problem(f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice", ours, UID) is None
    assert "another pod" in (validate.cgroup_parent_problem(other, ours, UID) or "")
    # No uid in the request: the pod's current parent says whose it is.
    assert "another pod" in (validate.cgroup_parent_problem(other, ours) or "")


def test_a_container_answer_moving_the_pod_to_another_pods_cgroup_names_the_field() -> None:
    request = container_request()
    request.pod_meta.uid = UID
    request.pod_cgroup_parent = f"/kubepods/burstable/pod{UID}"
    response = echo(request)
    response.pod_cgroup_parent = f"/kubepods/burstable/pod{OTHER_UID}"
    problem = answer_problem(request, response)
    assert problem is not None and problem.field == "pod_cgroup_parent" and "another pod" in problem.reason


@pytest.mark.parametrize(("text", "shown"), [
    ("no capacity", "no capacity"),
    ("café ✓", "café ✓"),  # printable text of any script stays as it is
    ("a\nI1126 forged line", "a\\nI1126 forged line"),
    ("\r\x1b[2Kvalid; no change", "\\r\\x1b[2Kvalid; no change"),
    ("\x9b31m\x7f\t", "\\x9b31m\\x7f\\t"),  # a C1 CSI, DEL, a tab
    ("abc\u202edef\u2028", "abc\\u202edef\\u2028"),  # a bidi override, a line separator
])
def test_plugin_text_is_shown_with_its_controls_escaped(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(shown) == shown  # twice changes nothing


def test_plugin_text_is_clipped() -> None:
    assert printable("e" * (3 << 20)) == "e" * (PLUGIN_TEXT_MAX_CHARS - 3) + "..."
    assert len(printable("\x1b" * 5000)) == PLUGIN_TEXT_MAX_CHARS  # escaping never grows past the bound
    assert printable("abcdef", 5) == "ab..."
