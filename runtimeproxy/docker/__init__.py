"""Docker mode: the proxy serves the Docker Engine API (HTTP/1.1) and relays it to dockerd.

`relay` is the reverse proxy (one client connection at a time, h11 for the framing), `tunnel` the raw
byte pumps after a `101` upgrade, `headers` the hop-by-hop rules, `routes` and `interception` the seam
where hooks will rewrite the five lifecycle routes, `server` the listening socket and shutdown.
"""
