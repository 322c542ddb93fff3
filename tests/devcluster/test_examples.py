"""The demo's reading of deploy/examples/pods: every file's documents, expectations and `after` rounds."""
from pathlib import Path

import pytest

from devcluster import examples
from devcluster.examples import ExampleError, end_state, load, waves

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    examples.fgpu.io/expect: {expect}
{after}spec:
  containers: [{{name: main, image: x}}]
"""


def write(tmp_path, name, expect="admitted", after=None, extra=""):
    line = f"    examples.fgpu.io/after: {after}\n" if after else ""
    (tmp_path / f"{name}.yaml").write_text(extra + POD.format(name=name, expect=expect, after=line))


def test_the_shipped_examples_load_and_the_preemptor_comes_after_its_victim():
    classes, pods = load(Path(__file__).resolve().parents[2] / "deploy" / "examples" / "pods")
    assert {c["metadata"]["name"]: c["value"] for c in classes} == {"fgpu-example-batch": 100,
                                                                     "fgpu-example-serving": 1000}
    rounds = waves(pods)
    assert [e.name for e in rounds[-1]] == ["preemption"] and "preemption-victim" in {e.name for e in rounds[0]}
    assert {e.expect for e in pods} == set(examples.OUTCOMES)


def test_rounds_and_what_each_pod_waits_for(tmp_path):
    pc = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 1\n---\n"
    write(tmp_path, "victim", "preempted", extra=pc)
    write(tmp_path, "a-preemptor", after="victim")
    write(tmp_path, "parked", "unschedulable")
    classes, pods = load(tmp_path)
    assert [c["metadata"]["name"] for c in classes] == ["low"]
    first, second = waves(pods)
    assert [e.name for e in first] == ["parked", "victim"] and [e.name for e in second] == ["a-preemptor"]
    victim = next(e for e in pods if e.name == "victim")
    assert end_state(victim, first) == "running"  # until its preemptor exists
    assert end_state(victim, first + second) == "gone"
    assert end_state(second[0], first + second) == "running"
    assert end_state(first[0], first) == "unschedulable"
    # --pods keeps the named pods and their files' PriorityClasses
    assert [e.name for e in load(tmp_path, ["parked"])[1]] == ["parked"] and load(tmp_path, ["parked"])[0] == []


@pytest.mark.parametrize("files, message", [
    ([("p", "maybe", None)], "p.yaml: metadata.annotations[examples.fgpu.io/expect] is 'maybe' (allowed: admitted, "
                             "unschedulable, denied, preempted)"),
    ([("p", "admitted", "nobody")], "p.yaml: metadata.annotations[examples.fgpu.io/after] names nobody, which is "
                                    "not among the example pods applied (--pods must name it too)"),
])
def test_bad_examples_say_which_field(tmp_path, files, message):
    for name, expect, after in files:
        write(tmp_path, name, expect, after)
    with pytest.raises(ExampleError) as err:
        load(tmp_path)
    assert str(err.value) == message


def test_a_cycle_and_an_unknown_kind_are_refused(tmp_path):
    write(tmp_path, "a", after="b")
    write(tmp_path, "b", after="a")
    with pytest.raises(ExampleError, match="forms a cycle among a, b"):
        waves(load(tmp_path)[1])
    (tmp_path / "c.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: c}\n")
    with pytest.raises(ExampleError, match="c.yaml: kind 'Service' is not an example object"):
        load(tmp_path)
