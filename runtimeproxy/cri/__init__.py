"""The CRI frontend: a gRPC server that relays every CRI call to the runtime and hooks seven of them."""
