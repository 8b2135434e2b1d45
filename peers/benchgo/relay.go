// The relay role: every method forwarded as raw bytes to one backend connection, the way
// koord-runtime-proxy's engine does it (UnknownServiceHandler + a pass-through codec).
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var relayedStream = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

func runRelay(args []string) error {
	flags := flag.NewFlagSet("relay", flag.ExitOnError)
	listen := flags.String("listen", "", "socket to serve on")
	backend := flags.String("backend", "", "backend socket")
	flags.Parse(args)
	upstream, err := dialUnix(*backend)
	if err != nil {
		return err
	}
	os.Remove(*listen)
	listener, err := listenUnix(*listen)
	if err != nil {
		return err
	}
	server := rawServer(func(_ interface{}, downstream grpc.ServerStream) error {
		return relay(upstream, downstream)
	})
	stopOnSignal(server.Stop)
	return server.Serve(listener)
}

// relay forwards one call: metadata up, messages both ways, headers, trailers and status down.
func relay(upstream *grpc.ClientConn, downstream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(downstream)
	ctx, cancel := context.WithCancel(downstream.Context())
	defer cancel()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	call, err := upstream.NewStream(ctx, relayedStream, method)
	if err != nil {
		return err
	}
	go forwardRequests(downstream, call)
	return forwardResponses(call, downstream)
}

func forwardRequests(downstream grpc.ServerStream, call grpc.ClientStream) {
	for {
		var message []byte
		if err := downstream.RecvMsg(&message); err != nil {
			call.CloseSend() // io.EOF: the caller is done; otherwise the context cancels the call
			return
		}
		if err := call.SendMsg(&message); err != nil {
			return
		}
	}
}

func forwardResponses(call grpc.ClientStream, downstream grpc.ServerStream) error {
	header, err := call.Header()
	if err == nil && len(header) > 0 {
		downstream.SendHeader(header)
	}
	for {
		var message []byte
		err := call.RecvMsg(&message)
		if errors.Is(err, io.EOF) {
			downstream.SetTrailer(call.Trailer())
			return nil
		}
		if err != nil {
			downstream.SetTrailer(call.Trailer())
			return status.Convert(err).Err()
		}
		if err := downstream.SendMsg(&message); err != nil {
			return err
		}
	}
}
