"""Operator pieces beside the proxy: admin gRPC service, runtimeproxyctl, metrics and health over HTTP."""
