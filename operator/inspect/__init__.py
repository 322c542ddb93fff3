"""`fgpu inspect` (also `kubectl fgpu inspect`): what fgpu allocated on each node and GPU, and where a pod went
or why it did not. Like Aliyun's `kubectl inspect gpushare`, for fractional and MIG GPUs.

`model` is the report's shape, `view` builds it from raw Node/Pod dicts (pure: no Kubernetes client),
`render` prints it as a table, JSON or YAML, and `command` is the thin shell that lists the objects.
"""
