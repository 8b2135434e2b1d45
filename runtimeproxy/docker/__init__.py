"""Docker mode: the proxy serves the Docker Engine API (HTTP/1.1) and relays it to dockerd.

`relay` is the reverse proxy (one client connection at a time; `incoming` reads the client's requests,
llhttp for plain ones and h11 for the rest, llhttp dockerd's answers in `upstream`, `framing` writes both
hops), `tunnel` the raw relay after a `101` upgrade, `eventloop` the loop Docker mode runs on (uvloop), `headers` the hop-by-hop rules, `routes` and `interception` the seam
where hooks rewrite the five lifecycle routes, `hooks` the hooked calls (on the core in runtimeproxy.hooks),
`messages` and `edits` the Docker body <-> hook conversions, `bodies` the hooked bodies decoded off the loop, `engine` the client of dockerd's API, `runtime` the core's
`Runtime` (`recovery`'s loaders for the store's refill from dockerd, the proxy's own update, stop and remove),
`server` the listening socket, the operator endpoints and shutdown, `report` and `requests` what the operator side
reads (dockerd's state, requests by route).
"""
