"""fgpu's Kubernetes operator: fractional-GPU scheduler, admission webhook and metrics.

Installed as ``fgpu_operator`` (``operator`` is a standard-library module). The placement core in
``fgpu_operator.placement`` is pure Python and is shared by the Kopf operator and ``fgpu simulate``.
"""
