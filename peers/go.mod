// The project's compiled test peers: the real Go clients and plugins the tests drive the proxy with.
// Every third-party module comes from the Go module proxy at the version pinned here (go.sum holds the hashes).
module runtimeproxy/peers

go 1.26.6

require (
	github.com/containerd/nri v0.12.5
	github.com/containerd/ttrpc v1.2.7
	google.golang.org/protobuf v1.36.12
	k8s.io/cri-api v0.37.2
)

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/knqyf263/go-plugin v0.9.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/tetratelabs/wazero v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/grpc v1.82.1 // indirect
)
