"""The replayed cri-dockerd requests are what the Docker relay's hooks expect to read (no dockerd needed)."""

from __future__ import annotations

import json

from runtimeproxy.docker.messages import container_of_create, create_name, parse_kube_name, sandbox_of_create
from runtimeproxy.docker.routes import HookedRoute, hooked_route
from rplab import cridockerd_requests as shapes

POD = shapes.PodShape(name="web", uid="u-1", labels={"app": "a"}, annotations={"team": "t"}, image="img")


def test_every_lifecycle_request_is_on_its_hooked_route() -> None:
    targets = [("POST", shapes.create_target(shapes.sandbox_name(POD)), HookedRoute.CREATE),
               ("POST", shapes.start_target("c1"), HookedRoute.START),
               ("POST", shapes.update_target("c1"), HookedRoute.UPDATE),
               ("POST", shapes.stop_target("c1", 30), HookedRoute.STOP),
               ("DELETE", shapes.remove_target("c1"), HookedRoute.REMOVE)]
    for method, target, route in targets:
        match = hooked_route(method.encode(), target.encode())
        assert match is not None and match.route is route, target
    assert hooked_route(b"GET", shapes.list_by_sandbox_target("s1").encode()) is None


def test_the_bodies_read_as_the_pod_and_container_they_describe() -> None:
    sandbox = json.loads(shapes.go_json(shapes.fill(shapes.sandbox_create_body(POD), POD.placeholders())))
    name = parse_kube_name(create_name(shapes.create_target(shapes.sandbox_name(POD)).partition("?")[2]))
    assert name is not None and (name.container, name.pod, name.uid) == ("POD", "web", "u-1")
    pod = sandbox_of_create(name, sandbox)
    assert pod.labels["app"] == "a" and pod.annotations == {"kubernetes.io/config.source": "api", "team": "t"}
    assert pod.cgroup_parent == "/rp-replay" and pod.resources is not None and pod.resources.cpu_shares == 2
    body = json.loads(shapes.go_json(shapes.fill(shapes.container_create_body(POD), POD.placeholders("s-1"))))
    container_name = parse_kube_name(shapes.container_name(POD))
    assert container_name is not None
    container = container_of_create(container_name, body)
    assert container.env == {"KEEP": "me", "ALSO": "kept"} and container.resources is not None
    assert container.resources.memory_swap_limit_in_bytes == POD.memory  # cri-dockerd's "no swap"
    assert body["Labels"]["io.kubernetes.sandbox.id"] == "s-1" and body["HostConfig"]["PidMode"] == "container:s-1"


def test_go_json_and_headers_are_written_as_go_does() -> None:
    assert shapes.go_json({"a": "<&>", "b": None}) == b'{"a":"\\u003c\\u0026\\u003e","b":null}\n'
    assert shapes.headers("POST", None) == [(b"Host", b"docker"), (b"User-Agent", b"Go-http-client/1.1"),
                                            (b"Content-Length", b"0"), (b"Content-Type", b"text/plain")]
    assert shapes.headers("DELETE", None) == [(b"Host", b"docker"), (b"User-Agent", b"Go-http-client/1.1")]
