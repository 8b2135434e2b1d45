"""runtimeproxy benchmark: the proxy beside its anchors, driven by a compiled client.

    .venv/bin/python -m bench [--quick] [--json PATH] [--cases small,large,kubelet,startup,docker,idle,kubelet-node,soak]
                                                                                   (from the repo root)

Load side: `benchgo client` (peers/benchgo, a compiled peer built by rplab.peers; see gopeers.py):
raw bytes, one HTTP/2 connection, N goroutines. It gets about 10x the calls/s a Python client
does, so the client is never what limits a figure.

Peers, each its own process, all in one run:
  direct     the instant backend itself (`benchgo backend`; real containerd in the containerd cases,
             a private real dockerd in the Docker case)
  proxy      runtimeproxy (`python -m runtimeproxy`, this checkout)
  koord      koordinator's koord-runtime-proxy v1.8.0 (peer koord-runtime-proxy, built from the Go module
             proxy on first use, ~6 min cold), the program ours replaces: it decodes and re-encodes every
             runtime.v1 message. In a private mount namespace (rplab.koord_proxy): its plugin directory
             /etc/runtime/hookserver.d is hard-coded, and the host's /etc stays untouched
  grpc-only  the proxy with --cri-frame-relay=false: every call through its gRPC server, the transport
             before the frame relay became the default; CRI cases
  aio-relay  the smallest grpcio aio relay (bench/aio_relay.py): the floor for a Python relay
  go-relay   `benchgo relay`: grpc-go UnknownServiceHandler + pass-through codec, the engine
             koord-runtime-proxy forwards with
  socat      an L4 byte relay (no HTTP/2 at all): the floor of any extra hop
  go-proxy   `benchgo httpproxy`: net/http/httputil.ReverseProxy between unix sockets (101 upgrades
             included), roughly what koord-runtime-proxy's Docker mode is; Docker case only
  echo-hop   a bare Python grpc.aio server answering itself (rplab.synthetic): what one
             Python server hop costs, with no upstream call
  plugin     the proxy with a no-op plugin (rplab.example_plugin --empty) on all seven hooks
  koord-plugin  koord-runtime-proxy with the same no-op plugin on all seven hooks; startup case only
  nri        the proxy hosting NRI (--nri-socket) with one no-op NRI plugin (rplab.nri_plugin, launched
             from its plugin directory) on every NRI event; startup case only
  decode-all the proxy with --benchmark-decode-all (every message decoded and re-encoded: the
             rejected design), at 16 MB

Cases (--cases picks some):
  small    Version: p50/p99 at concurrency 1, calls/s at 1, 16, 64; CPU per call in each hop process,
           back to back and at a kubelet's pace (5 calls/s: each call wakes the hop's sleeping threads)
  large    ListContainers of 4, 16, 48 MB: p50, CPU per call; RSS idle, right after, settled
           (the answer's size is asked for in the request, so even the minimal relay gets it right)
  kubelet  a kubelet's steady state on a node with N pods (real containerd): each hop's CPU % of one core,
           from a Python client's schedule, and from a replay of the real kubelet v1.35's mix (one grpc-go
           client per method, each at the kubelet's pace: calls are sparse, so each pays a hop's wake-up
           costs, which back-to-back calls share); unfiltered ListContainers and ListPodSandbox of the N pods
           at 5 calls/s: p50 and the hop's CPU per call
  startup  pod startup (RunPodSandbox, CreateContainer, StartContainer) and the whole lifecycle, real
           containerd: direct, proxy, proxy + no-op plugin on all seven hooks, go-relay
  docker   Docker mode against a private real dockerd with N pod-sandbox containers (a few running) and
           one busybox container to exec into, driven by `benchgo dockerclient` (HTTP/1.1, keep-alive,
           N goroutines): list (GET /containers/json?all=1) and inspect (cycling through the N) p50/p99
           at 1, calls/s at 1 and 16; an exec round trip (create, start with the 101 upgrade and the raw
           stream to EOF, inspect until exited) p50/p99 at 1, calls/s at 4; CPU per call in each hop and
           in the client. Peers: direct (dockerd), proxy (--backend-runtime-mode=Docker), go-proxy, socat
           (and baseline, with --baseline).
           No plugin peer: no hook fires on list, inspect or exec. It takes about 2.3 minutes (mostly
           exec round trips, ~70 ms of runc each), so it is not in the default set: ask for it with
           --cases docker (or --cases all).
  idle     each hop's CPU % of one core over one window with no calls, all measured at once: the proxy
           (and the baseline's) with no plugins and with 500 registered plugins, the relays beside them
  kubelet-node  the real kubelet v1.35.8 standalone (rplab.kubelet_node, peer kubelet) with N static pods
           (110; --quick 10) on real containerd, through direct, proxy and koord in turn (the kubelet owns its
           runtime: one at a time): each hop's CPU % of one core over one window (120 s; --quick 20 s),
           containerd's and the kubelet's beside. About 10 minutes: not in the default set
  soak     a soak under the real kubelet: N static pods (110; --quick 10), one pod churned (removed, written
           back) every 10 s, through the proxy with the no-op hook plugin on all hooks and a hosted no-op NRI
           plugin, then through koord-runtime-proxy with the same hook plugin: each hop's CPU % over the window
           (30 min; --quick 2 min) and each half, and the slopes of its CPU %, RSS, descriptors and tasks over the
           second half (flat: nothing leaks, no call costs more as the soak goes on). About 65 minutes: not in the default set

Figures are medians over the rounds; in each round every peer runs once, in turn, so drifting load
hits all alike. CPU per call comes from utime+stime in /proc/PID/stat of the hop process (and its
children, for socat) over a run, divided by the calls it served; in the Docker case, for hops that do
not fork, from their threads' schedstat (ns), as an exec run is too few calls for 10 ms ticks. MB =
2**20 bytes. Ratio columns are the proxy's figure over direct's, the aio relay's, the Go relay's and
the Go reverse proxy's. Targets are printed met or MISSED, never asserted. Results also go to JSON
(bench/results/latest.json) with machine, date, commit and command. Every process and temporary
directory is removed at the end, also on failure or Ctrl-C; a failing case prints its error and the
run goes on.

The package: peers (the processes; Lab starts each on first use), cases (one module per family of cases, and
measure: how long, how often, and the one way peers are compared), report (rows, targets, the table, the JSON),
machine (what the run ran on), run (the command). gopeers, procfs, docker_node and aio_relay are their helpers;
binary_figures is a separate tool (`.venv/bin/python -m bench.binary_figures`).
"""
