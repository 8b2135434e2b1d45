"""runtimeproxy: a transparent runtime proxy that runs resource-management plugins on the container lifecycle.

It sits between the kubelet and the runtime, in CRI mode (kubelet -> proxy -> containerd, or any CRI runtime) or in
Docker mode (cri-dockerd -> proxy -> dockerd, the Docker Engine API), and runs two kinds of plugins on the pod and
container lifecycle calls: koordinator's runtime hook plugins and NRI plugins, which it hosts as containerd's NRI
would. The packages, from the bottom:

  pb        the generated protobuf/gRPC modules (CRI, koordinator's hooks, NRI, the admin API)
  endpoints, options, listener, trust, logformat, allocator, klogflags, lifecycle, gotext, activation, greeting,
  relay, usage
            small shared modules: addresses, the options, the socket and its lock, who is trusted, logs, malloc
            tuning, the Go binary's flags, signals, Go's text forms, systemd's sockets and the early greeting on
            them, a gRPC server on a socket it did not bind, a command's one-line errors
  hooks     the core, which knows no transport: hook points, the one chain step for every plugin kind, the
            container store and its rebuild, the runtime interface a frontend implements, toggles and traces
  nri       the runtime side of NRI: ttrpc and the mux, one plugin's session, the registry and fan-out
  plugin    the plugin author's kit (write a hook plugin, try one against the proxy's rules)
  cri       the CRI frontend: a gRPC relay that hooks the lifecycle calls
  docker    the Docker frontend: an HTTP/1.1 reverse proxy for the Engine API that hooks the lifecycle routes
  admin     the operator's side: admin service, runtimeproxyctl, metrics and health
  report, call_tally
            the seam: what a frontend tells the operator side, calls counted
  app, cli  the process: assembles the frontend, the core, NRI and admin; the command line
"""

__version__ = "0.1.0"
