"""The decision trace's recorder and the chain record, without any plugin: bounds, lookup, collisions, shadows."""

from __future__ import annotations

from runtimeproxy.hooks.chain import ChainRecord
from runtimeproxy.hooks.trace import (
    MAX_CHANGES_PER_STEP, OK, PodKey, TraceEntry, TraceRecorder, bounded_changes, compact, field_family, pod_key,
)
from runtimeproxy.hooks.changes import field_changes
from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks


def container(uid: str = "u-1", cpu_shares: int = 2, cpuset: str = "",
              cid: str = "") -> hooks.ContainerResourceHookRequest:
    return hooks.ContainerResourceHookRequest(
        pod_meta=hooks.PodSandboxMetadata(name=f"web-{uid}", uid=uid, namespace="ns"),
        container_meta=hooks.ContainerMetadata(name="app", id=cid),
        container_resources=hooks.LinuxContainerResources(cpu_shares=cpu_shares, cpuset_cpus=cpuset),
        container_envs={"A": "1"},
    )


def entry(hook: str = "PreCreateContainer") -> TraceEntry:
    return TraceEntry(0.0, hook, "pod", "")


def who(uid: str, cid: str = "") -> PodKey:
    return PodKey(uid, "ns", f"web-{uid}", cid, "app" if cid else "")


def test_a_pods_ring_keeps_the_newest_entries_and_counts_the_dropped() -> None:
    recorder = TraceRecorder(entries_per_pod=3)
    for hook in ["a", "b", "c", "d", "e"]:
        recorder.record(who("u-1"), entry(hook))
    pod = recorder.find("u-1")
    assert pod is not None
    assert [e.hook for e in pod.entries] == ["c", "d", "e"]
    assert pod.dropped == 2


def test_the_least_recently_traced_pod_is_evicted_past_the_cap() -> None:
    recorder = TraceRecorder(entries_per_pod=2, max_pods=2)
    recorder.record(who("u-1"), entry())
    recorder.record(who("u-2"), entry())
    recorder.record(who("u-1"), entry())  # u-1 is now the most recent
    recorder.record(who("u-3"), entry())
    assert recorder.find("u-2") is None
    assert recorder.find("u-1") is not None and recorder.find("u-3") is not None
    assert recorder.pod_count == 2 and recorder.evicted_pods == 1
    assert recorder.entry_count == 3


def test_a_pod_is_found_by_uid_name_sandbox_container_and_id_prefix() -> None:
    recorder = TraceRecorder()
    recorder.record(who("u-1", cid="c0ffee00112233"), entry())
    recorder.learn_sandbox(PodKey("u-1", "", ""), "5a4db0x")
    recorder.record(who("u-2"), entry())
    for query in ["u-1", "ns/web-u-1", "web-u-1", "5a4db0x", "c0ffee00112233", "c0ffee", "5a4d"]:
        pod = recorder.find(query)
        assert pod is not None and pod.uid == "u-1", query
    assert recorder.find("u-") is None  # ambiguous prefix
    assert recorder.find("other/web-u-1") is None


def test_removing_the_pod_drops_its_trace_and_aliases() -> None:
    recorder = TraceRecorder()
    recorder.record(who("u-1", cid="c1"), entry())
    recorder.learn_container(pod_key(container(cid="c2")), "c2", sandbox_id="sb1")
    assert recorder.find("sb1") is not None and recorder.find("c2") is not None
    recorder.forget_pod("sb1")
    assert recorder.find("u-1") is None and recorder.find("c1") is None and recorder.pod_count == 0


def test_an_untraced_pods_ids_are_not_remembered() -> None:
    recorder = TraceRecorder()
    recorder.learn_sandbox(PodKey("u-9", "", ""), "sb9")
    assert recorder.find("sb9") is None and recorder.pod_count == 0


def test_trace_off_records_nothing() -> None:
    assert not TraceRecorder(entries_per_pod=0).enabled


def test_field_family_collapses_map_keys() -> None:
    assert field_family('container_envs["A\\"]x"]') == "container_envs[*]"
    assert field_family("container_resources.unified[\"memory.high\"]") == "container_resources.unified[*]"
    assert field_family("container_resources.cpu_shares") == "container_resources.cpu_shares"


def test_compact_shows_set_fields_on_one_line_and_big_maps_by_size() -> None:
    request = container()
    request.container_annotations.update({str(i): "v" for i in range(10)})
    line = compact(request)
    assert "\n" not in line
    assert 'name="web-u-1"' in line and "container_annotations{10 entries}" in line and "container_envs{A=1}" in line
    assert len(compact(request, limit=40)) == 40


def test_changes_kept_per_step_are_bounded() -> None:
    before = container()
    after = container()
    after.container_envs.update({f"V{i}": "x" * 500 for i in range(MAX_CHANGES_PER_STEP + 5)})
    kept = bounded_changes(field_changes(before, after))
    assert len(kept) == MAX_CHANGES_PER_STEP + 1
    assert kept[-1].field == "(and 5 more fields)"
    assert len(str(kept[0].after)) <= 160


def run_chain(record: ChainRecord, *answers: tuple[str, hooks.ContainerResourceHookRequest]) -> None:
    current = record.original
    for plugin, after in answers:
        record.step(plugin, OK)
        record.applied(current, after)
        current = after


def test_two_plugins_setting_one_field_differently_collide_and_the_later_is_named() -> None:
    record = ChainRecord("PreCreateContainer", container(), traced=False)
    run_chain(record, ("a.json", container(cpu_shares=512)), ("b.json", container(cpu_shares=1024)))
    [collision] = record.collisions()
    assert (collision.field, collision.earlier_plugin, collision.earlier_value, collision.later_plugin,
            collision.later_value) == ("container_resources.cpu_shares", "a.json", 512, "b.json", 1024)


def test_plugins_changing_different_fields_or_echoing_do_not_collide() -> None:
    record = ChainRecord("PreCreateContainer", container(), traced=True)
    first = container(cpu_shares=512)
    second = container(cpu_shares=512, cpuset="0-1")
    run_chain(record, ("a.json", first), ("b.json", second))
    assert record.collisions() == []
    assert [str(c) for c in record.steps[0].changes] == ["container_resources.cpu_shares: 2 -> 512"]
    assert [str(c) for c in record.steps[1].changes] == ['container_resources.cpuset_cpus: "" -> "0-1"']


def test_a_shadow_disagrees_only_on_fields_it_would_set_to_another_value() -> None:
    record = ChainRecord("PreCreateContainer", container(), traced=True)
    run_chain(record, ("a.json", container(cpu_shares=512, cpuset="0-1")))
    record.step("next.json", OK, shadow=True)
    record.shadowed(container(cpu_shares=512, cpuset="0-1"), container(cpu_shares=512, cpuset="0-3"))
    record.step("same.json", OK, shadow=True)
    record.shadowed(container(cpu_shares=512, cpuset="0-1"), container(cpu_shares=512, cpuset="0-1"))
    final = container(cpu_shares=512, cpuset="0-1")
    record.collisions()
    disagreeing, agreeing = record.shadow_outcomes(final)
    assert disagreeing.changed and [str(c) for c in disagreeing.disagreements] == [
        'container_resources.cpuset_cpus: "0-1" -> "0-3"']
    assert not agreeing.changed and not agreeing.disagreements
    built = record.entry("container app", final, [], "sent to the runtime", written_back=True)
    assert [str(c) for c in built.sent_changes] == [
        "container_resources.cpu_shares: 2 -> 512", 'container_resources.cpuset_cpus: "" -> "0-1"']
