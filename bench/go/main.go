// benchgo: the benchmark's compiled peers, one binary with three roles.
//
//	benchgo client  -socket PATH -method /pkg.Service/Method -request FILE [-concurrency N] [-seconds S | -count N]
//	benchgo relay   -listen PATH -backend PATH
//	benchgo backend -listen PATH -answers DIR
//
// All three pass message bytes through without decoding them (rawCodec).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchgo client|relay|backend [flags]")
		os.Exit(2)
	}
	roles := map[string]func([]string) error{"client": runClient, "relay": runRelay, "backend": runBackend}
	role, ok := roles[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "benchgo: unknown role %q (client, relay, backend)\n", os.Args[1])
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
