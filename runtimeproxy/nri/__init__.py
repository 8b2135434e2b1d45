"""NRI hosting: the proxy plays the runtime side of containerd's Node Resource Interface for runtimes without it.

The wire layer: `ttrpc` (containerd's ttrpc framing and unary calls), `mux` (NRI's connection multiplexer)
and `session` (one plugin connection: registration, Configure, Synchronize, calls, Shutdown). The NRI
messages are runtimeproxy.pb.nri.pkg.api.v1alpha1.api_pb2, generated from protos/nri/.
"""
