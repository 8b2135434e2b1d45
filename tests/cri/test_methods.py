from runtimeproxy.cri.methods import Kind, cri_method_table, cri_service_names, split_path, unknown_method


def test_table_covers_both_cri_versions_and_services() -> None:
    table = cri_method_table()
    assert set(cri_service_names()) == {
        "runtime.v1.RuntimeService", "runtime.v1.ImageService",
        "runtime.v1alpha2.RuntimeService", "runtime.v1alpha2.ImageService",
    }
    for path in ("/runtime.v1.RuntimeService/RunPodSandbox", "/runtime.v1alpha2.RuntimeService/RunPodSandbox",
                 "/runtime.v1.ImageService/PullImage", "/runtime.v1alpha2.ImageService/ImageFsInfo"):
        assert table[path].kind is Kind.UNARY_UNARY


def test_kinds_come_from_the_descriptors() -> None:
    table = cri_method_table()
    events = table["/runtime.v1.RuntimeService/GetContainerEvents"]
    assert events.kind is Kind.UNARY_STREAM
    assert events.output_type is not None and events.output_type.full_name == "runtime.v1.ContainerEventResponse"
    streaming = {m.name for m in table.values() if m.kind is Kind.UNARY_STREAM}
    assert "GetContainerEvents" in streaming
    assert any(name.startswith("Stream") for name in streaming)
    assert all(m.kind in (Kind.UNARY_UNARY, Kind.UNARY_STREAM) for m in table.values())


def test_image_service_routing_flag() -> None:
    table = cri_method_table()
    assert table["/runtime.v1.ImageService/ListImages"].is_image_service
    assert not table["/runtime.v1.RuntimeService/Version"].is_image_service


def test_unknown_methods_become_streams_and_keep_their_service() -> None:
    method = unknown_method("/runtime.v9.ImageService/Teleport")
    assert method is not None and method.kind is Kind.STREAM_STREAM
    assert method.is_image_service and method.input_type is None


def test_malformed_paths_are_rejected() -> None:
    for bad in ("", "Version", "/", "/svc", "/svc/", "//m", "/a/b/c"):
        assert split_path(bad) is None
        assert unknown_method(bad) is None
    assert split_path("/a.B/C") == ("a.B", "C")
