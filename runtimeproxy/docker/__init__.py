"""Docker mode: the proxy serves the Docker Engine API (HTTP/1.1) and relays it to dockerd.

`relay` is the reverse proxy (one client connection at a time; h11 reads the client's requests, llhttp
dockerd's answers in `upstream`, `framing` writes both hops), `tunnel` the raw byte pumps after a `101`
upgrade, `headers` the hop-by-hop rules, `routes` and `interception` the seam
where hooks rewrite the five lifecycle routes, `hooks` the hooked calls (on the core in runtimeproxy.hooks),
`messages` the Docker body <-> hook conversions, `engine` and `recovery` the store's refill from dockerd,
`server` the listening socket, the operator endpoints and shutdown.
"""
