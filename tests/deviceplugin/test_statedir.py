"""The plugin's state directory (allocation journal): where it is chosen from, creation, unwritable ones named
by `--state-dir`, the old location beside tokenSecretFile kept, and one journal per running plugin."""
import os

import pytest

from deviceplugin import cli
from deviceplugin.records import AllocationRecorder, JournalBusy
from deviceplugin.statedir import FLAG, STATE_DIR_ENV, explicit_state_dir, prepare_state_dir
from simgpu.errors import SimgpuError

UNWRITABLE = "/proc/fgpu-no-such-dir"  # not creatable, even by root
FRACTIONAL = "version: v1\ngpus: [{model: H100, count: 1, sharing: fractional}]\n"


def test_flag_then_config_then_env():
    env = {STATE_DIR_ENV: "/e"}
    assert explicit_state_dir("/f", "/c", env) == ("/f", FLAG)
    assert explicit_state_dir(None, "/c", env)[0] == "/c"
    assert explicit_state_dir(None, None, env)[0] == "/e"
    assert explicit_state_dir(None, None, {}) is None


def test_explicit_dir_is_created(tmp_path):
    target = tmp_path / "a" / "b"
    assert prepare_state_dir(str(target), None, {}, str(tmp_path / "secret")) == str(target)
    assert target.is_dir()


def test_default_keeps_the_old_place_beside_the_token_secret(tmp_path):
    assert prepare_state_dir(None, None, {}, str(tmp_path / "secret")) == str(tmp_path)


def test_default_falls_back_when_the_secret_dir_is_read_only(tmp_path):
    fallback = tmp_path / "var-lib-fgpu"
    got = prepare_state_dir(None, None, {}, f"{UNWRITABLE}/secret", default=str(fallback))
    assert got == str(fallback) and fallback.is_dir()


def test_no_writable_default_names_the_flag_and_both_places():
    with pytest.raises(SimgpuError) as err:
        prepare_state_dir(None, None, {}, f"{UNWRITABLE}/secret", default=f"{UNWRITABLE}/state")
    assert err.value.field == FLAG
    assert str(err.value).count(UNWRITABLE) == 2


@pytest.mark.parametrize("flag,config,env,source", [
    (UNWRITABLE, None, {}, None),
    (None, UNWRITABLE, {}, "stateDir"),
    (None, None, {STATE_DIR_ENV: UNWRITABLE}, STATE_DIR_ENV),
])
def test_unwritable_explicit_dir_is_an_error_naming_the_flag(tmp_path, flag, config, env, source):
    with pytest.raises(SimgpuError) as err:
        prepare_state_dir(flag, config, env, str(tmp_path / "secret"))
    assert err.value.field == FLAG and UNWRITABLE in str(err.value)
    if source:
        assert source in str(err.value)


def test_a_file_is_not_a_state_dir(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(SimgpuError, match="--state-dir"):
        prepare_state_dir(str(path), None, {}, str(tmp_path / "secret"))


def test_cli_exits_2_with_one_line_for_an_unwritable_state_dir(tmp_path, secret_file, capsys):
    cfg = tmp_path / "node.yaml"
    cfg.write_text(FRACTIONAL + f"tokenSecretFile: {secret_file}\n")
    code = cli.main(["--config", str(cfg), "--node-name", "n", "--device-plugin-path", str(tmp_path),
                     "--standalone", "--state-dir", UNWRITABLE])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith("fgpu-device-plugin: error: --state-dir:") and UNWRITABLE in err


class _FakeKubePods:
    """Stands in for deviceplugin.kube.KubePods: only the journal, for real (lock and replay)."""

    def __init__(self, api, node, journal_path=None):
        self.journal_path = journal_path
        self.recorder = AllocationRecorder(lambda key, containers: True, journal_path)

    def close(self):
        self.recorder.close()


@pytest.fixture
def fake_api(monkeypatch):
    import deviceplugin.kube as kube

    monkeypatch.setattr(kube, "load_api_client", lambda path: object())
    monkeypatch.setattr(kube, "KubePods", _FakeKubePods)


def _plugin(tmp_path, secret_file, *extra, config_extra=""):
    cfg = tmp_path / "node.yaml"
    cfg.write_text(FRACTIONAL + f"tokenSecretFile: {secret_file}\n{config_extra}")
    args = cli.build_parser().parse_args(["--config", str(cfg), "--node-name", "n", "--device-plugin-path",
                                          str(tmp_path), "--kubeconfig", "unused", *extra])
    return cli.Plugin(args)


def test_journal_goes_to_the_state_dir(tmp_path, secret_file, fake_api):
    plugin = _plugin(tmp_path, secret_file, "--state-dir", str(tmp_path / "state"))
    try:
        assert plugin.shared.pods.journal_path == str(tmp_path / "state" / cli.JOURNAL_NAME)
    finally:
        plugin.stop()


def test_journal_stays_beside_the_secret_without_a_state_dir(tmp_path, secret_file, fake_api, monkeypatch):
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    plugin = _plugin(tmp_path, secret_file)
    try:
        assert plugin.shared.pods.journal_path == os.path.join(os.path.dirname(secret_file), cli.JOURNAL_NAME)
    finally:
        plugin.stop()


def test_config_state_dir_is_used(tmp_path, secret_file, fake_api):
    plugin = _plugin(tmp_path, secret_file, config_extra=f"stateDir: {tmp_path / 'cfgstate'}\n")
    try:
        assert plugin.shared.pods.journal_path.startswith(str(tmp_path / "cfgstate"))
    finally:
        plugin.stop()


def test_second_plugin_on_one_state_dir_is_refused(tmp_path, secret_file, fake_api, capsys):
    state = str(tmp_path / "state")
    first = _plugin(tmp_path, secret_file, "--state-dir", state)
    try:
        with pytest.raises(SimgpuError) as err:
            _plugin(tmp_path, secret_file, "--state-dir", state)
        assert err.value.field == FLAG and "in use" in str(err.value)
    finally:
        first.stop()
    _plugin(tmp_path, secret_file, "--state-dir", state).stop()  # free again once the first has stopped


def test_recorder_lock_is_per_journal(tmp_path):
    journal = str(tmp_path / "j")
    rec = AllocationRecorder(lambda key, containers: True, journal)
    try:
        with pytest.raises(JournalBusy):
            AllocationRecorder(lambda key, containers: True, journal)
        other = AllocationRecorder(lambda key, containers: True, str(tmp_path / "k"))
        other.close()
    finally:
        rec.close()
