"""`mlagate runner-check` (mlagate/measure/runner.py): what a runner's host lets its jobs reach, judged per
role, on fake hosts (CPU; no Docker daemon, no runner, no GPU here). `gather` runs for real on a runner
folder made here, its daemons and sudo faked."""

import json

import pytest

from mlagate import cli
from mlagate.measure import runner

ROOTLESS = runner.Daemon("unix:///run/user/1001/docker.sock", True, ["name=seccomp,profile=builtin", "name=rootless"])
ROOTFUL = runner.Daemon("unix:///var/run/docker.sock", True, ["name=seccomp,profile=builtin", "name=cgroupns"])
REFUSED = runner.Daemon("unix:///var/run/docker.sock", False, error="PermissionError: permission denied")


def host(**change):
    """A PR runner host as docs/containers.md sets one up: nothing to find."""
    good = dict(uid=1001, user="runner", groups=["runner"], sudo=False, daemons=[ROOTLESS, REFUSED],
                runner={"poolName": "mlagate-pr", "ephemeral": True}, labels=list(runner.LABELS),
                runner_env={"MLAGATE_PR_RENDER_NODE": "/dev/dri/renderD129"}, render_node_is_device=True)
    return runner.Host(**{**good, **change})


def failed(findings):
    return {f.what for f in findings if f.level == runner.FAIL}


def test_a_pr_runner_set_up_as_documented_has_nothing_to_find():
    findings = runner.judge(host(), "pr")
    assert failed(findings) == set() and all(f.level == runner.OK for f in findings)


@pytest.mark.parametrize("change, what", [
    ({"uid": 0, "user": "root"}, "runner user"),
    ({"sudo": True}, "sudo"),
    ({"daemons": [ROOTLESS, ROOTFUL]}, "docker"),  # the rootful socket is reachable beside the rootless one
    ({"daemons": [ROOTFUL]}, "docker"),
    ({"daemons": [REFUSED]}, "docker"),
    ({"runner": {"poolName": "mlagate-trusted", "ephemeral": True}}, "runner group"),
    ({"runner": {"poolName": "Default", "ephemeral": True}}, "runner group"),
    ({"runner": {"poolName": "mlagate-pr"}}, "ephemeral"),
    ({"runner_env": {}}, "GPU lent to pull requests"),
    ({"runner_env": {"MLAGATE_PR_RENDER_NODE": "/dev/dri"}}, "GPU lent to pull requests"),
    ({"render_node_is_device": False}, "GPU lent to pull requests"),
])
def test_each_thing_a_pr_runner_must_not_allow_fails(change, what):
    assert failed(runner.judge(host(**change), "pr")) == {what}


def test_a_trusted_runner_may_use_the_rootful_daemon_and_is_told_so():
    findings = runner.judge(host(daemons=[ROOTFUL], runner={"poolName": "mlagate-trusted"}, runner_env={}), "trusted")
    assert failed(findings) == set()
    assert any(f.level == runner.WARN and "rootful" in f.detail for f in findings)
    assert failed(runner.judge(host(runner={"poolName": "mlagate-pr"}), "trusted")) == {"runner group"}


def test_userns_remap_is_isolated_but_warned_about():
    userns = runner.Daemon("unix:///var/run/docker.sock", True, ["name=userns"])
    findings = runner.judge(host(daemons=[userns]), "pr")
    assert failed(findings) == set() and any(f.level == runner.WARN and "userns" in f.detail for f in findings)


def test_missing_labels_and_a_just_in_time_runner():
    findings = {f.what: f for f in runner.judge(host(labels=["self-hosted"], runner=None), "pr")}
    assert findings["labels"].level == runner.WARN and "gfx942" in findings["labels"].detail
    assert findings["registration"].level == runner.OK  # a JIT runner has no .runner file


def test_gather_reads_the_runner_folder_and_asks_the_jobs_daemon(tmp_path, monkeypatch):
    (tmp_path / ".runner").write_text("\ufeff" + json.dumps({"agentName": "mi300x-1", "poolName": "mlagate-pr",
                                                             "ephemeral": True}))
    socket = tmp_path / "docker.sock"
    socket.write_text("")  # exists: gather asks it
    (tmp_path / ".env").write_text(f"DOCKER_HOST=unix://{socket}\nMLAGATE_PR_RENDER_NODE=/dev/null\n# x=y\n")
    asked = []
    monkeypatch.setattr(runner, "daemon", lambda a: asked.append(a) or runner.Daemon(a, True, ["name=rootless"]))
    monkeypatch.setattr(runner, "sudo_without_password", lambda: False)
    found = runner.gather(tmp_path, ["self-hosted"])
    assert asked[0] == f"unix://{socket}" and found.runner["poolName"] == "mlagate-pr"
    assert found.runner_env["MLAGATE_PR_RENDER_NODE"] == "/dev/null" and found.render_node_is_device  # /dev/null is one
    assert failed(runner.judge(found, "pr")) >= {"GPU lent to pull requests"}  # but not a render node


def test_a_daemon_that_does_not_answer_is_unreachable(tmp_path):
    d = runner.daemon(f"unix://{tmp_path}/none.sock")
    assert not d.reachable and d.error and d.isolated is None


def test_the_command_exits_1_on_a_finding_and_2_without_a_runner_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "gather", lambda folder, labels: host(labels=labels))
    assert cli.main(["runner-check", "--role", "pr", "--runner-dir", str(tmp_path),
                     "--labels", "self-hosted,linux,gfx942"]) == 0
    assert "nothing a pr runner must not have" in capsys.readouterr().out
    monkeypatch.setattr(runner, "gather", lambda folder, labels: host(daemons=[ROOTFUL]))
    assert cli.main(["runner-check", "--role", "pr", "--runner-dir", str(tmp_path)]) == 1
    assert "FAIL  docker: unix:///var/run/docker.sock: a rootful daemon" in capsys.readouterr().out
    assert cli.main(["runner-check", "--role", "pr", "--runner-dir", str(tmp_path / "none")]) == 2
