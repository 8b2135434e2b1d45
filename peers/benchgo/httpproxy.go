// The HTTP proxy role: net/http/httputil.ReverseProxy between two unix sockets, roughly what
// koord-runtime-proxy's Docker mode is. Answers stream through as they come (FlushInterval -1) and a
// 101 answer (exec or attach with Connection: Upgrade) becomes a raw two-way copy (ReverseProxy does
// protocol switches since Go 1.12).
package main

import (
	"errors"
	"flag"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

// proxyConnections is the idle keep-alive connections kept to dockerd.
const proxyConnections = 64

func runHTTPProxy(args []string) error {
	flags := flag.NewFlagSet("httpproxy", flag.ExitOnError)
	listen := flags.String("listen", "", "socket to serve on")
	backend := flags.String("backend", "", "Docker Engine API socket to relay to")
	flags.Parse(args)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "docker"})
	proxy.Transport = unixTransport(*backend, proxyConnections)
	proxy.FlushInterval = -1
	os.Remove(*listen)
	listener, err := listenUnix(*listen)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: proxy}
	stopOnSignal(func() { server.Close() })
	if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
