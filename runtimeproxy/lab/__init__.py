"""Local lab: offline OCI images and a private containerd, shared by the e2e tests and the local-lab command."""
