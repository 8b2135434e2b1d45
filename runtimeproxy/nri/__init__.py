"""NRI hosting: the proxy plays the runtime side of containerd's Node Resource Interface for runtimes without it.

The wire layer: `ttrpc` (containerd's ttrpc framing and unary calls), `mux` (NRI's connection multiplexer)
and `session` (one plugin connection: registration, Configure, Synchronize, calls, Shutdown). The NRI
messages are runtimeproxy.pb.nri.pkg.api.v1alpha1.api_pb2, generated from protos/nri/ (mypy reads them).

The host, along containerd/nri's pkg/adaptation: `host` (the registry: plugin list, its one lock, attach and
Synchronize, each event's fan-out; adaptation.go), `call` (one plugin's call of an adjusting event as a step
of the core's chain), `result` (what the answers ask of other containers, carried out through the core;
result.go), `events` (NRI's event numbers and the state each reports), `adjust` and `edits` (folding an
adjustment into the container: what is applied, refused, or a conflict), `convert` (the core's records as NRI
messages), `explain` (an event in the pod trace) and `launch` (plugins the proxy starts from a directory).
"""
