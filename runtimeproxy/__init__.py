"""runtimeproxy: a transparent CRI proxy that runs resource-management hook plugins."""

__version__ = "0.1.0"
