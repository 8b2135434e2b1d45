"""Operator pieces beside the proxy: admin gRPC service, runtimeproxyctl, metrics and health over HTTP.

`service` (the admin gRPC service on its socket), `status` and `trace` (what it answers, read from the proxy's
parts), `ctl` (runtimeproxyctl: arguments, calls, exit codes) and `render` (its human tables), `metrics` and
`http` (the Prometheus series and the small HTTP server for /metrics, /healthz, /readyz), `operator` (starting and
stopping these beside the frontend).
"""
