// benchgo: the benchmark's compiled peers, one binary with five roles.
//
//	benchgo client       -socket PATH -method /pkg.Service/Method -request FILE [-concurrency N] [-seconds S | -count N]
//	benchgo relay        -listen PATH -backend PATH
//	benchgo backend      -listen PATH -answers DIR
//	benchgo dockerclient -socket PATH -op list|inspect|exec [-ids FILE] [-concurrency N] [-seconds S | -count N]
//	benchgo httpproxy    -listen PATH -backend PATH
//
// The gRPC roles pass message bytes through without decoding them (rawCodec); the HTTP roles
// (Docker Engine API on unix sockets) read answers as bytes too.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchgo client|relay|backend|dockerclient|httpproxy [flags]")
		os.Exit(2)
	}
	roles := map[string]func([]string) error{"client": runClient, "relay": runRelay, "backend": runBackend,
		"dockerclient": runDockerClient, "httpproxy": runHTTPProxy}
	role, ok := roles[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "benchgo: unknown role %q (client, relay, backend, dockerclient, httpproxy)\n", os.Args[1])
		os.Exit(2)
	}
	if err := role(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchgo %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// stopOnSignal calls stop on SIGTERM or SIGINT.
func stopOnSignal(stop func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stop()
	}()
}
