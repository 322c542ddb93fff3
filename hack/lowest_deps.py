"""A virtual environment with the declared minimum of every direct dependency, for `make test` to run the unit
tests on: each floor in pyproject.toml (runtime and every extra) installed exactly, everything else pip's newest
that fits. A floor that does not hold then fails CI instead of a user's install.

    python hack/lowest_deps.py                 (re)build it if pyproject.toml or setup.py changed; print its path
    python hack/lowest_deps.py --constraints   print the pins only

Every direct dependency must have a floor (`>=` or `==`): one without is refused, naming it. The venv lives in
$FGPU_CACHE/venv-lowest/ (default ~/.cache/fgpu), one per checkout, holds the checkout editable (so its console
scripts run this source) and is rebuilt only when pyproject.toml or setup.py changes.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*?)\s*$")


def pins(project: dict) -> list[str]:
    """`name==floor` for each direct dependency (the extras' included; fgpu's own extras skipped)."""
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    out: dict[str, str] = {}
    for text in requirements:
        found = REQUIREMENT.match(text.split(";")[0])
        if found is None:
            raise SystemExit(f"pyproject.toml: cannot read the requirement {text!r}")
        name, _, spec = found.groups()
        if name.lower().replace("_", "-") == project["name"]:
            continue
        floor = re.search(r"(?:>=|==)\s*([^,\s]+)", spec)
        if floor is None:
            raise SystemExit(f"pyproject.toml: {text!r} has no floor (allowed: name>=VERSION or name==VERSION)")
        key = name.lower().replace("_", "-")
        if out.setdefault(key, floor.group(1)) != floor.group(1):
            raise SystemExit(f"pyproject.toml: {name} has two floors, {out[key]} and {floor.group(1)}")
    return [f"{name}=={version}" for name, version in sorted(out.items())]


def stamp() -> str:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


def venv_path() -> Path:
    cache = Path(os.environ.get("FGPU_CACHE") or Path.home() / ".cache" / "fgpu")
    return cache / "venv-lowest" / hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]


def build(venv: Path, python: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    marker = venv / ".fgpu-lowest-deps"
    if marker.is_file() and marker.read_text() == stamp():
        return
    constraints = venv.with_name(venv.name + ".constraints.txt")
    venv.parent.mkdir(parents=True, exist_ok=True)
    constraints.write_text("\n".join(pins(project)) + "\n")
    subprocess.run([python, "-I", "-m", "venv", "--clear", str(venv)], check=True, stdout=sys.stderr)
    pip = [str(venv / "bin" / "python"), "-I", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, stdout=sys.stderr)
    extras = ",".join(project.get("optional-dependencies", {}))
    subprocess.run([*pip, "-c", str(constraints), "-e", f"{ROOT}[{extras}]"], check=True, cwd=ROOT, stdout=sys.stderr)
    marker.write_text(stamp())


def main(argv: list[str]) -> int:
    if argv == ["--constraints"]:
        print("\n".join(pins(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])))
        return 0
    if argv:
        print("usage: python hack/lowest_deps.py [--constraints]", file=sys.stderr)
        return 2
    venv = venv_path()
    build(venv, sys.executable)
    print(venv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
