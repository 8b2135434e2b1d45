"""NRI hosting: the proxy plays the runtime side of containerd's Node Resource Interface for runtimes without it.

The wire layer: `ttrpc` (containerd's ttrpc framing and unary calls), `mux` (NRI's connection multiplexer)
and `session` (one plugin connection: registration, Configure, Synchronize, calls, Shutdown). The NRI
messages are runtimeproxy.pb.nri.pkg.api.v1alpha1.api_pb2, generated from protos/nri/ (mypy reads them).

The host, along containerd/nri's pkg/adaptation: `host` (the registry: plugin list, attach and Synchronize,
each event's fan-out and the stops its evictions cause; adaptation.go), `lock` (its one lock, not re-entrant;
lock.go), `call` (one plugin's call of an adjusting event as a step of the core's chain), `result` (what the
answers ask of other containers, carried out through the core; result.go), `events` (the core's event table,
hooks.nri_events, on the wire: each row's messages, the mask, the notifications), `adjust` and `edits` (folding an
adjustment into the container: what is applied, refused, or a conflict), `table` (what each runtime makes of
each adjustment field, shown in docs/nri.md), `convert` (the core's records as NRI
messages), `validation` (ValidateContainerAdjustment: the whole adjustment and its owners as result.go collects
them), `default_validator` (containerd/nri's built-in default validator and its TOML config), `explain` (an event
in the pod trace) and `launch` (plugins the proxy starts from a directory).
"""
