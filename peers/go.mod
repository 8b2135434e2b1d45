// The project's compiled test peers: the real Go clients and plugins the tests drive the proxy with.
// Every third-party module comes from the Go module proxy at the version pinned here (go.sum holds the hashes).
module runtimeproxy/peers

go 1.26.6

require (
	github.com/containerd/nri v0.12.5
	k8s.io/cri-api v0.37.2
	k8s.io/cri-client v0.37.2
	sigs.k8s.io/cri-tools v1.37.0
)
