"""Runtime hooks: the seven hook points, the plugin dispatcher and the pod/container store (its records: model)."""
