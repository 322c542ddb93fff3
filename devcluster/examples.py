"""The example manifests of deploy/examples/pods as the demo (and deploy/examples/apply.sh) applies them.

A file holds one or more YAML documents: Pods and the PriorityClasses they name. Each pod says what should become
of it in `examples.fgpu.io/expect`:

    admitted       the webhook lets it in and it ends Running (however long placement takes: a re-layout, a
                   preemption); `fgpu inspect` says where
    unschedulable  admitted, then parked Pending with the scheduler's reason
    denied         refused by the webhook, naming the field
    preempted      admitted and Running, then evicted by a higher-priority pod (DisruptionTarget, a Preempted
                   Event) and gone

and, in `examples.fgpu.io/after: NAME[,NAME]`, which example pods must be Running before it is created (a
preemptor comes after its victim; a pod that needs a GPU re-laid after the pod that holds the old layout)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

EXPECT = "examples.fgpu.io/expect"
AFTER = "examples.fgpu.io/after"
OUTCOMES = ("admitted", "unschedulable", "denied", "preempted")
KINDS = ("Pod", "PriorityClass")


class ExampleError(Exception):
    """An example file the demo cannot apply; the message names the file, the field and what is allowed."""


@dataclass(frozen=True)
class Example:
    name: str
    path: Path
    manifest: dict
    expect: str
    after: tuple[str, ...]

    @property
    def about(self) -> str:
        """The file's leading comment: what the example asks for and what should happen."""
        lines = []
        for line in self.path.read_text().splitlines():
            if not line.startswith("#"):
                break
            lines.append(line.lstrip("# ").strip())
        return " ".join(lines)


def load(directory: Path, only: list[str] | None = None) -> tuple[list[dict], list[Example]]:
    """(PriorityClasses, pods) of every file in `directory`, in file order; `only` keeps the named pods (and the
    PriorityClasses of their files). ExampleError on a document or annotation the demo does not understand."""
    classes: list[dict] = []
    pods: list[Example] = []
    for path in sorted(directory.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        mine = []
        for doc in docs:
            kind = doc.get("kind") if isinstance(doc, dict) else None
            if kind not in KINDS:
                raise ExampleError(f"{path.name}: kind {kind!r} is not an example object (allowed: {', '.join(KINDS)})")
            if kind == "Pod":
                mine.append(_example(path, doc))
        if only is not None:
            mine = [e for e in mine if e.name in only]
        if mine:
            pods.extend(mine)
            classes.extend(d for d in docs if d["kind"] == "PriorityClass")
    names = {e.name for e in pods}
    for e in pods:
        missing = [n for n in e.after if n not in names]
        if missing:
            raise ExampleError(f"{e.path.name}: metadata.annotations[{AFTER}] names {', '.join(missing)}, which is "
                               f"not among the example pods applied (--pods must name it too)")
    return classes, pods


def _example(path: Path, pod: dict) -> Example:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    expect = annotations.get(EXPECT)
    if expect not in OUTCOMES:
        raise ExampleError(f"{path.name}: metadata.annotations[{EXPECT}] is {expect!r} (allowed: {', '.join(OUTCOMES)})")
    after = tuple(n.strip() for n in str(annotations.get(AFTER, "")).split(",") if n.strip())
    return Example(meta["name"], path, pod, expect, after)


def waves(pods: list[Example]) -> list[list[Example]]:
    """The pods in creation rounds: each round only after every pod its pods name in `after` exists in an
    earlier one. ExampleError on a cycle."""
    done: set[str] = set()
    left = list(pods)
    out = []
    while left:
        ready = [e for e in left if all(n in done for n in e.after)]
        if not ready:
            raise ExampleError(f"metadata.annotations[{AFTER}] forms a cycle among {', '.join(e.name for e in left)}")
        out.append(ready)
        done.update(e.name for e in ready)
        left = [e for e in left if e.name not in done]
    return out


def end_state(example: Example, created: list[Example]) -> str:
    """The state the demo waits for once the pods in `created` exist: `running`, `unschedulable`, `gone` or
    `denied`; a victim runs until a pod that comes after it exists, then is gone."""
    if example.expect == "denied":
        return "denied"
    if example.expect == "preempted":
        return "gone" if any(example.name in e.after for e in created) else "running"
    return "running" if example.expect == "admitted" else "unschedulable"
