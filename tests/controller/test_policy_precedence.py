"""Operator configuration where users look: the scheduler names taken over and the Aliyun memory unit come
from `fgpu operator` flags (the chart's values) unless the SchedulingPolicy `default` sets them, field by
field; a field the object leaves out, or deleting it, falls back to the flag, not to the built-in default."""
import argparse
import subprocess
import sys

import pytest
from fgpu_operator.controller.command import PRECEDENCE, register
from fgpu_operator.controller.handlers import OperatorConfig
from fgpu_operator.controller.policy import PolicyWatch

from fgpu_contracts.keys import TAKEOVER_SCHEDULERS


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fgpu")
    register(parser.add_subparsers())
    return parser.parse_args(["operator", *argv])


def test_flags_parse_and_default_to_the_built_in_values():
    args = parse()
    assert args.takeover_schedulers == TAKEOVER_SCHEDULERS and args.aliyun_memory_unit == "GiB"
    args = parse("--takeover-schedulers=hami-scheduler, kai-scheduler", "--aliyun-memory-unit=MiB")
    assert args.takeover_schedulers == ("hami-scheduler", "kai-scheduler") and args.aliyun_memory_unit == "MiB"
    assert parse("--takeover-schedulers=").takeover_schedulers == ()  # take none over


@pytest.mark.parametrize("flag", ["--takeover-schedulers=Hami_Scheduler", "--aliyun-memory-unit=KiB"])
def test_a_bad_flag_is_one_line_and_exit_2(flag):
    done = subprocess.run([sys.executable, "-m", "fgpu_operator.cli", "operator", flag], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert flag.split("=")[0] in done.stderr.strip().splitlines()[-1]


def test_help_says_which_wins():
    done = subprocess.run([sys.executable, "-m", "fgpu_operator.cli", "operator", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert " ".join(PRECEDENCE.split()) in " ".join(done.stdout.split())
    assert "--takeover-schedulers" in done.stdout and "--aliyun-memory-unit" in done.stdout


def test_the_object_wins_field_by_field_and_its_absence_is_the_flags():
    flags = OperatorConfig(policy="spread", takeover_schedulers=("hami-scheduler",),
                           aliyun_memory_unit="MiB").policy_flags()
    applied = []
    watch = PolicyWatch(flags, applied.append)
    obj = {"metadata": {"name": "default", "generation": 1}, "spec": {"aliyunMemoryUnit": "GiB"}}
    watch.on_event("ADDED", obj)
    assert (applied[-1].aliyun_memory_unit, applied[-1].takeover_schedulers, applied[-1].node_policy) == (
        "GiB", ("hami-scheduler",), "spread")  # the object's unit; the flags' schedulers and policy
    obj["spec"] = {"takeoverSchedulers": ["kai-scheduler"]}
    watch.on_event("MODIFIED", obj)
    assert (applied[-1].aliyun_memory_unit, applied[-1].takeover_schedulers) == ("MiB", ("kai-scheduler",))
    watch.on_event("DELETED", obj)
    assert applied[-1] == flags
