"""The README as issue 34 asks for it: at most 300 lines, a user's sections in a user's order, and a quick start of
exactly `make demo` and `make test`, both real targets of the Makefile."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
#: What a user needs, in the order they need it (other sections may sit between these).
ORDER = ("Quick start", "Deploy with Helm", "Request a GPU share", "Watch it", "Plan with simulate",
         "Where the numbers are")


def test_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def test_the_users_sections_come_in_the_users_order():
    headings = re.findall(r"^## (.+?)\s*$", README, re.M)
    assert [h for h in headings if h in ORDER] == list(ORDER)


def test_the_quick_start_is_make_demo_and_make_test_and_both_are_targets():
    block = re.search(r"^## Quick start\n.*?```bash\n(.*?)```", README, re.S | re.M)
    assert block, "README: no bash block under '## Quick start'"
    commands = [line.split("#")[0].strip() for line in block[1].splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.M))
    assert {"demo", "test"} <= targets
