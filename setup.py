"""Package discovery that pyproject.toml cannot express: the `operator/` folder is installed as
`fgpu_operator`, because `operator` is a standard-library module name."""
from setuptools import find_packages, setup

_ops = ["fgpu_operator" + p[len("operator"):] for p in find_packages(include=["operator", "operator.*"])]
setup(
    packages=find_packages(include=["simgpu", "simgpu.*", "deviceplugin", "deviceplugin.*", "fgpu_contracts",
                                 "fgpu_contracts.*"]) + _ops,
    package_dir={"fgpu_operator": "operator"},
)
