"""fgpu's Kubernetes operator: fractional-GPU scheduler, admission webhook and metrics.

Installed as ``fgpu_operator`` (``operator`` is a standard-library module). The placement core in
``fgpu_operator.placement`` is pure Python and is shared by the Kopf operator and ``fgpu simulate``.
"""
if __name__ == "operator":
    # This folder was found as `operator` because the repo root is on sys.path (e.g. `python -m X` run
    # from here). Hand the importer the standard-library module instead, so nothing else breaks.
    import importlib.machinery as _machinery
    import importlib.util as _util
    import sys as _sys
    import sysconfig as _sysconfig

    _spec = _machinery.PathFinder.find_spec("operator", [_sysconfig.get_paths()["stdlib"]])
    _std = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_std)
    _sys.modules["operator"] = _std
