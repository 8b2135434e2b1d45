// The project's compiled test peers: the real Go clients and plugins the tests drive the proxy with.
// Every third-party module comes from the Go module proxy at the version pinned here (go.sum holds the hashes).
module runtimeproxy/peers

go 1.26.6

require (
	google.golang.org/protobuf v1.36.12
	k8s.io/cri-api v0.37.2
)

require (
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/sdk/metric v1.46.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688 // indirect
	google.golang.org/grpc v1.83.2 // indirect
)
