"""Every relative link and image in README.md, docs/*.md and the chart's and simgpu's READMEs points at a file of the repository, and every `#anchor`
at a heading of its page (as GitHub names them), so a clone's documentation leads nowhere outside itself; and no
tracked file outside tests/ cites the design notes and references that live outside the repository."""
from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts" / "fgpu" / "README.md",
         REPO / "simgpu" / "README.md"]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def tracked() -> set[Path] | None:
    """The repository's files and their folders as a clone has them (git's index); None outside a git checkout."""
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    files = {REPO / f for f in done.stdout.split("\0") if f}
    return files | {parent for f in files for parent in f.parents if parent.is_relative_to(REPO)}


def prose(text: str) -> str:
    """The text outside fenced blocks and inline code, where a bracket is markdown and not code."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: markup dropped, lower case, punctuation gone, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    keep = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return keep.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base, n = slug(heading), 0
        name = base
        while name in out:  # GitHub numbers repeated headings: x, x-1, x-2
            n += 1
            name = f"{base}-{n}"
        out.add(name)
    return out


def links(page: Path) -> list[str]:
    return [m[1] for m in LINK.finditer(prose(page.read_text()))]


def broken(page: Path, files: set[Path] | None, root: Path = REPO) -> list[str]:
    out = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: (outside by intent)
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / unquote(path)).resolve() if path else page
        if path.startswith("/") or not where.is_relative_to(root):
            out.append(f"{target}: outside the repository")
        elif not where.exists() or (files is not None and where not in files):
            out.append(f"{target}: no such file in the repository")
        elif anchor and where.suffix == ".md" and unquote(anchor).lower() not in anchors(where):
            out.append(f"{target}: no heading '#{anchor}' in {where.relative_to(root)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves_inside_the_repository(page):
    assert broken(page, tracked()) == []


def test_the_checker_finds_a_missing_file_an_outside_path_and_a_missing_anchor(tmp_path):
    (tmp_path / "docs" / "monitoring").mkdir(parents=True)
    (tmp_path / "docs" / "monitoring" / "fgpu-qos.png").write_bytes(b"png")
    (tmp_path / "README.md").write_text("# fgpu\n\n## Quick start\n\n```\n## Not a heading\n```\n")
    page = tmp_path / "docs" / "probe.md"
    page.write_text("# A `Title`, here\n\n[ok](#a-title-here) [up](../README.md#quick-start) `[code](nowhere.md)`\n"
                    "[gone](nowhere.md) [out](../../etc/passwd) [abs](/etc/passwd) [bad](../README.md#no-such)\n"
                    "[fenced](../README.md#not-a-heading) ![img](monitoring/fgpu-qos.png) [web](https://example.com/x.md)\n")
    found = [b.split(": ")[0] for b in broken(page, None, root=tmp_path)]
    assert found == ["nowhere.md", "../../etc/passwd", "/etc/passwd", "../README.md#no-such", "../README.md#not-a-heading"]
    untracked = {tmp_path / "README.md", tmp_path / "docs", tmp_path / "docs" / "probe.md"}  # the PNG is not in git
    assert [b.split(": ")[0] for b in broken(page, untracked, root=tmp_path)][-1] == "monitoring/fgpu-qos.png"


#: What the repository must not cite: design notes and references that live beside the checkout, not in it.
OUTSIDE = re.compile(r"DESIGN\.md|reference/[A-Za-z0-9_-]+\.md|\.\./shared|/work/shared")


def test_no_tracked_file_outside_tests_cites_what_a_clone_lacks():
    done = subprocess.run(["git", "-C", str(REPO), "grep", "-nIE", OUTSIDE.pattern, "--", ".", ":!tests/"],
                          capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr  # 1: nothing found
    hits = [line for line in done.stdout.splitlines() if line]
    assert hits == []
