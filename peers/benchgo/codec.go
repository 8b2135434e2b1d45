// Raw-bytes codec and the connection settings shared by the roles: gRPC (client, relay, backend)
// and HTTP/1.1 (dockerclient, httpproxy).
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// maxMessageBytes matches the proxy's limit for relayed messages.
const maxMessageBytes = 512 << 20

// rawCodec hands message bytes through untouched: *[]byte in both directions.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	switch message := v.(type) {
	case *[]byte:
		return *message, nil
	case []byte:
		return message, nil
	}
	return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	message, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*message = data // grpc-go allocates a fresh buffer per received message
	return nil
}

func (rawCodec) Name() string   { return "raw" }
func (rawCodec) String() string { return "raw" }

// dialUnix opens one HTTP/2 connection to a unix socket path, passing raw bytes.
func dialUnix(path string) (*grpc.ClientConn, error) {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return grpc.DialContext(ctx, "passthrough:///"+strings.TrimPrefix(path, "/"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithBlock(), grpc.WithContextDialer(dialer),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
			grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))
}

// listenUnix serves on a fresh unix socket path.
func listenUnix(path string) (net.Listener, error) {
	return net.Listen("unix", path)
}

// rawServer is a gRPC server whose every method goes to handler, as raw bytes.
func rawServer(handler grpc.StreamHandler) *grpc.Server {
	return grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(handler),
		grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes))
}

// unixTransport is an HTTP/1.1 transport to a unix socket keeping up to `connections` idle
// keep-alive connections.
func unixTransport(socket string, connections int) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		DisableCompression:  true,
	}
}
