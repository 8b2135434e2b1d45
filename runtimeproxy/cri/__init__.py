"""The CRI frontend: a gRPC server that relays every CRI call to the runtime and hooks the lifecycle ones.

`server` (the listening server, health, reflection), `forwarding` and `methods` (the raw-bytes relay of any
method, the method table), `framefront`, `h2frames`, `framerelay` and `routes` (--cri-frame-relay: an HTTP/2
relay in front of the gRPC server, each caller paired with a backend connection; its hand-written frames; the h2
legs of the calls it diverts; which calls it sends straight to a backend), `backend`, `probe` and `limits` (channels to the runtime, its liveness, gRPC limits),
`hooks` (the hooked calls: decode, ask the core, re-encode), `messages` and `edits` (CRI <-> hook model),
`failures` (a hook failure as the kubelet reads it), `seccomp` (an NRI plugin's seccomp policy as a
profile file for one create), `runtime` (the core's `Runtime`: `recovery`'s loaders,
`images`' argv, the proxy's own calls), `calls` and `report` (what the operator side reads).
"""
