"""The layering of docs/architecture.md, as `lint-imports` checks it against the contracts in pyproject.toml
([tool.importlinter]): a pure placement core, fgpu_contracts importing no other fgpu package, simgpu importing
neither the device plugin nor the operator, and no import cycle between the modules of any package."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")  # the venv's, beside its python
    result = subprocess.run([str(lint_imports), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
