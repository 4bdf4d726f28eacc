"""The host steps of the workflows, run for real on this CPU machine (tests/host_fakes.py: the runner user is
nobody, a fake Docker daemon runs the containers' commands as root, git is real). Each of issue 45's three
paths from a pull request's containers to the host is planted as the PR's code would leave it, and the
workflow's own steps are run against it; each also runs against the steps of 9940045 (the constants OLD_*
below, copied from that commit's workflows), where the path is open, so the check can fail:

1. the final wipe: a read-only .git (chmod 555) with a core.fsmonitor command, then checkout's post step;
2. symlinks in out/: the job summary, the PR number file and the artifacts;
3. (Compose reading the PR's files is a model, not a run: tests/test_workflow_trust.py, rule 8.)
and the results push (a url.*.insteadOf in the workspace's .git, a listener for the token), the comment
(a hostile verdict.json), and copy-outputs itself (a device, a FIFO, an oversized file, a read-only folder).
"""

import io
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import host_fakes
from host_fakes import CAN_DROP, RUNNER_UID, FakeDocker, Listener, basic, expand, git, run_step, runner_host, step_env
from workflow_helpers import SCRIPTS, env_of, find_step, load_workflows, steps

needs_root = pytest.mark.skipif(not CAN_DROP, reason="needs root (to play the Docker daemon beside an "
                                                     "unprivileged runner user) and /usr/bin/python3")
SECRET = "SECRET-RUNNER-CREDENTIALS-0123"


@pytest.fixture
def workflows():
    return load_workflows()


@pytest.fixture
def host():
    with runner_host() as base:
        docker = FakeDocker(base)
        try:
            yield base, docker
        finally:
            docker.close()


def run_job_steps(workflow, job, selected, base, docker):
    """Run the selected steps of a job as the runner would (run: as the runner user; upload-artifact
    emulated: it follows symlinks, as v4.6.2 does). Returns {step name: result} and {artifact: files}."""
    results, artifacts = {}, {}
    for step in selected:
        name = step.get("name") or step.get("uses")
        if "run" in step:
            env = step_env(base, docker, **{k: expand(v, base) for k, v in env_of(workflow, job, step).items()})
            results[name] = run_step(step["run"], env, cwd=base / "workspace")
        elif re.match(r"actions/upload-(pages-)?artifact@", step["uses"]):
            root = Path(base / "workspace", expand(step["with"]["path"], base))
            files = {}
            for folder, _, names in os.walk(root, followlinks=True):
                for n in names:
                    path = Path(folder, n)
                    files[str(path.relative_to(root))] = path.read_bytes() if path.exists() else b""
            artifacts[step["with"].get("name", "github-pages")] = files
    return results, artifacts


def keep_trusted_files(base):
    """What the job's "Keep the ... compose file and host scripts" step leaves in $RUNNER_TEMP/trusted."""
    if SCRIPTS.exists():  # (workflows older than the scripts keep nothing)
        shutil.copytree(SCRIPTS, base / "temp" / "trusted" / "scripts")
        os.chmod(base / "temp" / "trusted", 0o755)


# --- path 1: the final wipe ------------------------------------------------------------------------------

# perf-pr.yml at 9940045: its cleanup after the PR's containers (the steps with always()).
OLD_PR_CLEANUP = [
    {"name": "Give the workspace back to the runner user", "if": "always() && steps.image.outcome == 'success'",
     "run": 'docker compose run --rm --no-deps shell chown -R "$(id -u):$(id -g)" /workspace'},
    {"name": "Remove the workspace", "if": "always()", "run": 'find "$GITHUB_WORKSPACE" -mindepth 1 -delete'},
]
# Checkout's post step (actions/checkout v5, "Post Check out"): git in the workspace, as the runner user,
# with the workspace made a safe.directory (checkout does so in the global config it gives git).
CHECKOUT_POST = ('export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0="$GITHUB_WORKSPACE"; '
                 "git config --local --name-only --get-regexp 'core\\.sshCommand'; "
                 "git submodule foreach --recursive sh -c \"git config --local --name-only --get-regexp "
                 "'core\\.sshCommand' && git config --local --unset-all 'core.sshCommand' || :\"")


def plant_a_read_only_git(base):
    """What a PR's container (root) can leave: a repository whose config runs a command on the next git
    call (core.fsmonitor), with .git and out/ made read-only so the runner user cannot delete them."""
    ws, marker = base / "workspace", base / "home" / "fsmonitor-ran"
    git("init", "-q", cwd=ws)
    (ws / "a").write_text("a\n")
    git("add", "a", cwd=ws)
    git("-c", "user.name=pr", "-c", "user.email=pr@x", "commit", "-qm", "pr", cwd=ws)
    git("config", "core.fsmonitor", f"touch {marker}; false", cwd=ws)
    (ws / "out" / "gate").mkdir(parents=True)
    (ws / "out" / "gate" / "gate.md").write_text("pass\n")
    for folder in (ws / ".git", ws / "out" / "gate"):
        folder.chmod(0o555)
    return marker


def wipe_outcome(workflow, job, base, docker):
    """Run the job's always() steps after its containers on a planted workspace, then checkout's post step.
    Returns (what is left in the workspace, whether the PR's fsmonitor command ran)."""
    marker = plant_a_read_only_git(base)
    cleanup = [s for s in steps(job) if "always()" in str(s.get("if", ""))]
    run_job_steps(workflow, job, cleanup, base, docker)
    run_step(CHECKOUT_POST, step_env(base), cwd=base / "workspace", strict=False)
    return sorted(os.listdir(base / "workspace")), marker.exists()


@needs_root
def test_the_final_wipe_leaves_no_git_for_checkouts_post_step(workflows, host):
    # Path 1 of issue 45 (fails on 9940045: .git stays, and the post step runs the PR's fsmonitor command).
    base, docker = host
    left, ran = wipe_outcome(workflows["perf-pr.yml"], workflows["perf-pr.yml"]["jobs"]["gate"], base, docker)
    assert (left, ran) == ([], False)
    wipes = [c for c in docker.calls if c[:1] == ["run"]]
    assert wipes and all("--network" in c and c[c.index("--network") + 1] == "none" for c in wipes)
    assert all("debian:bookworm-slim" in c for c in wipes)  # WIPE_IMAGE, never the PR's image


@needs_root
@pytest.mark.parametrize("variant", ["9940045", "rm -rf glob"])
def test_the_wipe_harness_finds_a_wipe_that_keeps_git(workflows, host, variant):
    base, docker = host
    workflow = workflows["perf-pr.yml"]
    job = workflow["jobs"]["gate"]
    if variant == "9940045":
        job["steps"] = [s for s in steps(job) if "always()" not in str(s.get("if", ""))] + OLD_PR_CLEANUP
    else:
        job["steps"][-1] = {"name": "wipe", "if": "always()", "run": 'rm -rf "$GITHUB_WORKSPACE"/*'}
    left, ran = wipe_outcome(workflow, job, base, docker)
    assert ".git" in left and ran


@needs_root
@pytest.mark.parametrize("job_path", [("perf-main.yml", "record"), ("perf-main.yml", "shard"), ("tune.yml", "tune")])
def test_every_self_hosted_job_ends_with_the_same_root_wipe(workflows, host, job_path):
    base, docker = host
    workflow = workflows[job_path[0]]
    assert wipe_outcome(workflow, workflow["jobs"][job_path[1]], base, docker) == ([], False)


# --- path 2: symlinks in out/ ------------------------------------------------------------------------------

# perf-pr.yml at 9940045: the host steps after the gate, on out/ in the workspace.
OLD_PR_OUTPUT_STEPS = [
    {"name": "Job summary", "if": "${{ !cancelled() }}",
     "run": 'if [ -f out/gate/gate.md ]; then cat out/gate/gate.md >> "$GITHUB_STEP_SUMMARY"; fi\n'},
    {"name": "Note the pull request number for the comment", "if": "${{ !cancelled() }}",
     "env": {"PR_NUMBER": "${{ github.event.pull_request.number }}"},
     "run": 'mkdir -p out/gate && echo "$PR_NUMBER" > out/gate/pr-number'},
    {"uses": "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02",
     "with": {"name": "perf-gate", "path": "out/gate/"}},
    {"uses": "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02",
     "with": {"name": "perf-report", "path": "out/report/"}},
]


def plant_symlinked_outputs(base):
    """out/ as a PR's container (root) can leave it: gate.md a symlink to the runner's credentials file,
    pr-number a symlink to a file of the runner user's, report/ linking the runner's home."""
    home, out = base / "home", base / "workspace" / "out"
    (home / ".credentials").write_text(SECRET)
    (home / ".bashrc").write_text("# the runner user's own\n")
    for f in (home / ".credentials", home / ".bashrc"):
        os.chown(f, RUNNER_UID, RUNNER_UID)
        f.chmod(0o600)
    (out / "gate").mkdir(parents=True)
    (out / "report").mkdir()
    (out / "gate" / "verdict.json").write_text('{"outcome": "pass"}')
    (out / "gate" / "gate.md").symlink_to(home / ".credentials")
    (out / "gate" / "pr-number").symlink_to(home / ".bashrc")
    (out / "report" / "index.html").write_text("<html></html>")
    (out / "report" / "home").symlink_to(home)


def output_steps(job):
    """The host steps between the gate and the cleanup (containers left out: they ran already)."""
    names = [s.get("name") for s in steps(job)]
    after = names.index("Record head and gate it against the base") + 1
    until = names.index("Stop this run's containers")
    return [s for s in steps(job)[after:until] if "docker" not in s.get("run", "")]


def leaks(workflow, job, base, docker):
    plant_symlinked_outputs(base)
    keep_trusted_files(base)
    results, artifacts = run_job_steps(workflow, job, output_steps(job), base, docker)
    summary = base / "temp" / "summary.md"
    found = []
    if summary.exists() and SECRET in summary.read_text():
        found.append("the job summary")
    found += [f"artifact {name}: {path}" for name, files in artifacts.items() for path, data in files.items()
              if SECRET.encode() in data]
    if (base / "home" / ".bashrc").read_text() != "# the runner user's own\n":
        found.append("a write through out/gate/pr-number")
    return found, results, artifacts


@needs_root
def test_host_steps_read_no_symlink_a_container_planted(workflows, host):
    # Path 2 of issue 45 (fails on 9940045: the summary, the perf-gate and perf-report artifacts carry the
    # credentials file, and the PR number is written into the runner user's own file).
    base, docker = host
    workflow = workflows["perf-pr.yml"]
    found, results, artifacts = leaks(workflow, workflow["jobs"]["gate"], base, docker)
    assert found == []
    copied = results["Copy the outputs out of the workspace"]
    assert copied.returncode == 2 and "out/gate/gate.md: a symlink" in copied.stderr
    assert artifacts["perf-gate"] == {"pr-number": b"12\n"}  # the copy was refused whole


@needs_root
def test_the_symlink_harness_finds_the_leaks_of_9940045(workflows, host):
    base, docker = host
    workflow = workflows["perf-pr.yml"]
    job = workflow["jobs"]["gate"]
    names = [s.get("name") for s in steps(job)]
    job["steps"] = (steps(job)[:names.index("Record head and gate it against the base") + 1] + OLD_PR_OUTPUT_STEPS
                    + steps(job)[names.index("Stop this run's containers"):])
    found, _, _ = leaks(workflow, job, base, docker)
    assert {"the job summary", "artifact perf-gate: gate.md", "artifact perf-report: home/.credentials",
            "a write through out/gate/pr-number"} <= set(found)


@needs_root
def test_clean_outputs_reach_the_summary_and_the_artifacts(workflows, host):
    base, docker = host
    workflow = workflows["perf-pr.yml"]
    job = workflow["jobs"]["gate"]
    out = base / "workspace" / "out"
    (out / "gate").mkdir(parents=True)
    (out / "gate" / "gate.md").write_text("## perf gate: pass\n")
    (out / "report" / "sub").mkdir(parents=True)
    (out / "report" / "sub" / "page.html").write_text("<p>")
    (out / "report" / "sub").chmod(0o555)  # read-only: copied all the same
    keep_trusted_files(base)
    results, artifacts = run_job_steps(workflow, job, output_steps(job), base, docker)
    assert all(r.returncode == 0 for r in results.values()), {n: r.stderr for n, r in results.items()}
    assert (base / "temp" / "summary.md").read_text() == "## perf gate: pass\n"
    assert artifacts == {"perf-gate": {"gate.md": b"## perf gate: pass\n", "pr-number": b"12\n"},
                         "perf-report": {"sub/page.html": b"<p>"}}


# --- copy-outputs itself ------------------------------------------------------------------------------------


def copy_outputs(base, *args):
    script = base / "bin" / "copy-outputs"  # where the runner user can read it, wherever this checkout is
    if not script.exists():
        shutil.copy(SCRIPTS / "copy-outputs", script)
    return run_step(f"python3 {script} " + " ".join(args), step_env(base), cwd=base / "workspace", runner_user=CAN_DROP)


def make(base, tree):
    for name, content in tree.items():
        path = base / "workspace" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        content(path) if callable(content) else path.write_bytes(content)


@pytest.mark.parametrize("tree, refused", [
    ({"out/a": b"x", "out/link": lambda p: p.symlink_to("/etc/passwd")}, "out/link: a symlink"),
    ({"out/a": b"x", "out/fifo": lambda p: os.mkfifo(p)}, "out/fifo: a FIFO"),
    ({"out/big": b"x" * (2 << 20)}, "out/big: 2097152 bytes, over --max-file-mib"),
    ({"real/a": b"x", "out": lambda p: p.symlink_to("real")}, "out: a symlink"),
    ({"out/d/a": b"x", "out/d/link": lambda p: p.symlink_to("..")}, "out/d/link: a symlink"),
])
def test_copy_outputs_refuses_the_whole_copy(tree, refused):
    with runner_host() as base:
        make(base, tree)
        out = copy_outputs(base, "--max-file-mib 1", "out", str(base / "temp" / "copy"))
        assert out.returncode == 2 and refused in out.stderr, out.stderr
        assert not (base / "temp" / "copy").exists()


@needs_root
def test_copy_outputs_refuses_what_the_runner_user_cannot_read():
    with runner_host() as base:
        make(base, {"out/a": b"x", "out/private/key": b"k"})
        (base / "workspace" / "out" / "private").chmod(0o700)  # root's, as a container left it
        out = copy_outputs(base, "out", str(base / "temp" / "copy"))
        assert out.returncode == 2 and "out/private: unreadable by this user" in out.stderr, out.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="mknod needs root (what a PR's container has, unless MKNOD is dropped)")
def test_copy_outputs_refuses_a_device_node():
    with runner_host() as base:
        make(base, {"out/disk": lambda p: os.mknod(p, 0o666 | 0o020000, os.makedev(1, 3))})
        out = copy_outputs(base, "out", str(base / "temp" / "copy"))
        assert out.returncode == 2 and "out/disk: a character device" in out.stderr


def test_copy_outputs_copies_files_and_folders_only_into_a_new_path():
    with runner_host() as base:
        make(base, {"out/gate/gate.md": b"g", "out/gate/sub/x.png": b"\x89PNG", "out/bundle": b"b"})
        (base / "workspace" / "out" / "gate" / "sub").chmod(0o555)  # read-only
        dest = base / "temp" / "gate"
        assert copy_outputs(base, "out/gate", str(dest)).returncode == 0
        assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["gate.md", "sub", "sub/x.png"]
        assert not any(p.is_symlink() for p in dest.rglob("*")) and (dest / "sub").stat().st_mode & 0o777 == 0o755
        assert copy_outputs(base, "out/bundle", str(base / "temp" / "b")).returncode == 0
        assert (base / "temp" / "b").read_bytes() == b"b"
        again = copy_outputs(base, "out/gate", str(dest))
        assert again.returncode == 2 and "exists" in again.stderr
        missing = copy_outputs(base, "out/none", str(base / "temp" / "none"))
        assert missing.returncode == 0 and "no out/none" in missing.stdout
        assert copy_outputs(base, "../home", str(base / "temp" / "h")).returncode == 2


# --- the results push -------------------------------------------------------------------------------------------


@pytest.fixture
def git_servers(tmp_path):
    """An HTTPS git server holding owner/mlagate, which takes the push token only, and a plain-HTTP listener
    that records what it is sent (where an insteadOf in a container-written .git points the push)."""
    tls = host_fakes.self_signed_cert(tmp_path)
    if tls is None:
        pytest.skip("openssl is not installed (it makes the test server's certificate)")
    root = tmp_path / "remote"
    git("init", "-q", "--bare", str(root / "owner" / "mlagate"))
    server = Listener(tls=tls, git_root=root, accept=basic("x-access-token", "t0ken"))
    capture = Listener()
    try:
        yield server, capture, root / "owner" / "mlagate", tls[0]
    finally:
        server.close()
        capture.close()


def plant_results_workspace(base, server, capture):
    """The record job's state at the push: the container committed the results in the workspace's
    repository and bundled the branch; the copy of the bundle is in $RUNNER_TEMP. The container could also
    have written the workspace's .git/config (an insteadOf to a listener) and the runner's ~/.gitconfig is
    hostile too (insteadOf, a hooks path whose pre-push hook leaves a mark)."""
    ws = base / "workspace"
    os.chown(ws, os.getuid(), os.getgid())  # the push step's user's workspace
    git("init", "-q", "-b", "perf-results", cwd=ws)
    (ws / "results.json").write_text("{}\n")
    git("add", ".", cwd=ws)
    git("-c", "user.name=bot", "-c", "user.email=bot@x", "commit", "-qm", "results", cwd=ws)
    git("remote", "add", "origin", f"{server.url}/owner/mlagate", cwd=ws)
    git("config", f"url.{capture.url}/.insteadOf", f"{server.url}/", cwd=ws)
    git("bundle", "create", str(base / "temp" / "perf-results.bundle"), "perf-results", cwd=ws)
    hooks = base / "home" / "hooks"
    hooks.mkdir()
    (hooks / "pre-push").write_text(f"#!/bin/sh\ntouch {base / 'home' / 'hook-ran'}\n")
    (hooks / "pre-push").chmod(0o755)
    (base / "home" / ".gitconfig").write_text(f'[url "{capture.url}/"]\n\tinsteadOf = {server.url}/\n'
                                              f"[core]\n\thooksPath = {hooks}\n")
    keep_trusted_files(base)
    return git("rev-parse", "HEAD", cwd=ws)


def push_outcome(push_step, base, servers):
    server, capture, remote, cert = servers
    commit = plant_results_workspace(base, server, capture)
    env = step_env(base, None, PUSH_TOKEN="t0ken", GITHUB_SERVER_URL=server.url, GITHUB_REPOSITORY="owner/mlagate",
                   GIT_SSL_CAINFO=str(cert), GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0=f"url.{capture.url}/.insteadOf",
                   GIT_CONFIG_VALUE_0=f"{server.url}/")
    out = run_step(push_step["run"], env, cwd=base / "workspace", runner_user=False)
    pushed = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "--verify", "-q", "refs/heads/perf-results"],
                            capture_output=True, text=True).stdout.strip()
    return out, commit, pushed, capture.seen, (base / "home" / "hook-ran").exists()


def test_the_push_goes_from_a_new_repository_to_github_only(workflows, git_servers):
    # The results push of issue 45 (fails on 9940045: the workspace's insteadOf sends the token to the
    # listener, and the runner's hooksPath runs a hook).
    with runner_host() as base:
        step = find_step(workflows["perf-main.yml"]["jobs"]["record"], r"^Push the results")
        out, commit, pushed, captured, hook_ran = push_outcome(step, base, git_servers)
        assert out.returncode == 0, out.stderr
        assert pushed == commit and captured == [] and not hook_ran
        assert basic("x-access-token", "t0ken") in git_servers[0].seen  # the token went to the server only
        assert not list((base / "temp").glob("push-results.*"))  # its repository is removed


def test_the_push_harness_finds_the_token_leak_of_9940045(git_servers):
    from test_workflow_trust import OLD_PUSH_SCRIPT

    with runner_host() as base:
        out, commit, pushed, captured, hook_ran = push_outcome({"run": OLD_PUSH_SCRIPT}, base, git_servers)
        assert basic("x-access-token", "t0ken") in captured and pushed != commit


def test_push_results_refuses_bad_input(git_servers):
    script = SCRIPTS / "push-results"
    with runner_host() as base:
        (base / "temp" / "link").symlink_to("/etc/passwd")
        cases = [({"GITHUB_SERVER_URL": "http://github.com"}, "perf-results", "not https://HOST"),
                 ({"GITHUB_REPOSITORY": "owner/x y"}, "perf-results", "not OWNER/NAME"),
                 ({"PUSH_TOKEN": ""}, "perf-results", "PUSH_TOKEN is empty"),
                 ({}, "perf results", "not a plain branch name")]
        base_env = {"PUSH_TOKEN": "t", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "owner/m"}
        for change, branch, message in cases:
            out = subprocess.run(["bash", str(script), str(base / "temp" / "b.bundle"), branch],
                                 env=step_env(base, **{**base_env, **change}), capture_output=True, text=True)
            assert out.returncode == 2 and message in out.stderr, (change, out.stderr)
        out = subprocess.run(["bash", str(script), str(base / "temp" / "link"), "perf-results"],
                             env=step_env(base, **base_env), capture_output=True, text=True)
        assert out.returncode == 2 and "not a regular file" in out.stderr
        out = subprocess.run(["bash", str(script), str(base / "temp" / "none.bundle"), "perf-results"],
                             env=step_env(base, **base_env), capture_output=True, text=True)
        assert out.returncode == 0 and "no perf-results commit to push" in out.stdout


# --- the comment -----------------------------------------------------------------------------------------------

HOSTILE_VERDICT = {
    "outcome": "pass", "base": "a" * 40, "head": "[x](https://evil.example)", "platform": "hip @maintainers",
    "errors": ["@org/team look: [pass](https://evil.example/badge.svg)"],
    "cases": [
        {"case": ["tilelang", 1, 4096, "bf16", 128, 1, "dense"], "status": "regression", "base_median_s": 3.2e-5,
         "head_median_s": 3.5e-5, "change": 0.09375, "p_value": 0.0012, "vendor_ratio": 0.98,
         "reasons": ["![badge](https://evil.example/pass.svg)"]},
        {"case": ["![pass](https://evil.example/x.svg)", 1, 2, "<img src=x>", 1, "dense"], "status": "error",
         "change": "[fake](https://evil.example)", "p_value": "@someone"},
        {"case": ["flash_mla", 1, 4096, "bf16", 128, 1, "dense"], "status": "pass"},
    ],
}


def artifact_zip(verdict: bytes, pr_number=b"12\n") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("verdict.json", verdict)
        z.writestr("pr-number", pr_number)
        z.writestr("gate.md", "## perf gate: **pass** [![ok](https://evil.example)](x) @everyone\n")
    return buffer.getvalue()


FAKE_GH = """#!/usr/bin/env bash
# gh, faked: the run's artifact listing (through the real jq), its zip, the pull request's head, the comment.
if [ "$1" = api ]; then
  case "$2" in
    */artifacts) jq -r "$4" "$FAKE/artifacts.json" ;;
    */zip) cat "$FAKE/artifact.zip" ;;
    *) exit 3 ;;
  esac
  exit 0
fi
if [ "$1 $2" = "pr view" ]; then echo "$PR_HEAD"; exit 0; fi
if [ "$1 $2" = "pr comment" ]; then
  while [ $# -gt 0 ]; do if [ "$1" = --body-file ]; then cp "$2" "$FAKE/posted.md"; fi; shift; done
  exit 0
fi
exit 3
"""


def comment(workflows, tmp_path, zipped: bytes, pr_head="c0ffee", steps_=None):
    """Run perf-comment's steps with a fake gh; (exit code of the last step run, posted body or None)."""
    if not shutil.which("jq") or not shutil.which("unzip"):
        pytest.skip("jq and unzip (on GitHub's runners) are not installed here")
    workflow = workflows["perf-comment.yml"]
    job = workflow["jobs"]["comment"]
    (tmp_path / "bin").mkdir(parents=True)
    (tmp_path / "bin" / "gh").write_text(FAKE_GH)
    (tmp_path / "bin" / "gh").chmod(0o755)
    (tmp_path / "artifact.zip").write_bytes(zipped)
    (tmp_path / "artifacts.json").write_text(json.dumps({"artifacts": [
        {"id": 99, "name": "perf-gate", "expired": False, "size_in_bytes": len(zipped)}]}))
    output = tmp_path / "output"
    output.write_text("")
    rc = None
    for step in steps_ or steps(job):
        env = {**os.environ, **env_of(workflow, job, step), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               "FAKE": str(tmp_path), "HEAD_SHA": "c0ffee", "PR_HEAD": pr_head, "RUN_ID": "5", "GH_TOKEN": "x",
               "GH_REPO": "owner/mlagate", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_OUTPUT": str(output)}
        if "if" in step and "found=true" not in output.read_text():
            continue
        rc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                            capture_output=True, text=True).returncode
        if rc:
            break
    posted = tmp_path / "posted.md"
    return rc, posted.read_text() if posted.exists() else None


def markdown_of_the_pr(body):
    """What of a pull request's own text reached the comment: links, images, mentions, HTML."""
    return [what for what, pattern in [("a link or image", r"\]\("), ("a mention", r"@"), ("HTML", r"<"),
                                       ("the PR's text", r"evil|badge|fake|everyone")] if re.search(pattern, body)]


def test_the_comment_is_the_template_filled_from_checked_fields(workflows, tmp_path):
    rc, body = comment(workflows, tmp_path, artifact_zip(json.dumps(HOSTILE_VERDICT).encode()))
    assert rc == 0 and body is not None
    assert markdown_of_the_pr(body) == []
    assert body.startswith("## perf gate: pass\n")
    assert "| `tilelang h=128 b=1 s=4096 bf16 dense` | regression | 32 µs | 35 µs | +9.38% | 0.001 | 0.98 |" in body
    assert "| `? h=1 b=1 s=2 ? dense` | error | – | – | – | – | – |" in body
    assert "Head `?` against base `aaaaaaaaaaaa` on `?`: 3 cases, 2 not passing, 1 errors." in body
    assert body.rstrip().endswith("https://github.com/owner/mlagate/actions/runs/5")


# perf-comment.yml at 9940045: gate.md posted with `<` escaped; links, images and mentions went through.
OLD_POST_SCRIPT = """\
mkdir -p perf-gate && unzip -q -o artifact.zip -d perf-gate  # what `gh run download` did
pr=$(head -c 16 perf-gate/pr-number)
head=$(gh pr view "$pr" --json headRefOid --jq .headRefOid)
if [ "$head" != "$HEAD_SHA" ]; then exit 0; fi
head -c 60000 perf-gate/gate.md | tr -d '\\000-\\010\\013-\\037\\177' | sed 's/</\\&lt;/g' > escaped.md
head -c 60000 escaped.md > body.md
gh pr comment "$pr" --body-file body.md
"""


def test_the_comment_harness_finds_the_markdown_9940045_posted(workflows, tmp_path):
    rc, body = comment(workflows, tmp_path, artifact_zip(json.dumps(HOSTILE_VERDICT).encode()),
                       steps_=[{"run": OLD_POST_SCRIPT}])
    assert body is not None and {"a link or image", "a mention", "the PR's text"} <= set(markdown_of_the_pr(body))


def test_the_unzipped_verdict_is_capped(workflows, tmp_path):
    huge = json.dumps({**HOSTILE_VERDICT, "pad": " " * (300 << 10)}).encode()  # zips to a few KiB
    zipped = artifact_zip(huge)
    assert len(zipped) < len(huge) // 10  # under the zipped-size check, over the cap unzipped
    rc, body = comment(workflows, tmp_path, zipped)
    assert rc == 1 and body is None


def test_no_comment_for_another_commit_a_bad_number_or_no_verdict(workflows, tmp_path):
    verdict = json.dumps(HOSTILE_VERDICT).encode()
    assert comment(workflows, tmp_path / "a", artifact_zip(verdict), pr_head="d1ffe7") == (0, None)
    assert comment(workflows, tmp_path / "b", artifact_zip(verdict, pr_number=b"12; rm -rf /\n"))[1] is None
    assert comment(workflows, tmp_path / "c", artifact_zip(b"")) == (0, None)
    assert comment(workflows, tmp_path / "d", artifact_zip(b"[not json"))[0] == 1


def test_the_comment_names_accepted_cases_from_checked_acceptance_fields(workflows, tmp_path):
    accepted = {"case": ["tilelang-seesaw", 64, 4096, "float16", 16, 1, "dense"], "status": "accepted",
                "change": 0.072, "acceptance": {"commit": "91da13fe9c", "pr": 7, "max_change": 0.12,
                                                "who": "a-maintainer", "why": "[x](https://evil.example)"}}
    hostile = {"case": ["tilelang-seesaw", 128, 4096, "float16", 16, 1, "dense"], "status": "accepted",
               "acceptance": {"commit": "[x](y)", "pr": "@everyone", "max_change": "fake", "who": "@org/team"}}
    rc, body = comment(workflows, tmp_path, artifact_zip(json.dumps(
        {**HOSTILE_VERDICT, "cases": [accepted, hostile]}).encode()))
    assert rc == 0 and markdown_of_the_pr(body) == []
    assert "| `tilelang-seesaw h=16 b=64 s=4096 float16 dense` | accepted |" in body
    assert ("- `tilelang-seesaw h=16 b=64 s=4096 float16 dense`: at most +12%, PR #7, accepted by `a-maintainer` "
            "for `91da13fe9c`") in body
    assert "at most –, PR #?, accepted by `?` for `?`" in body


def test_the_comment_of_the_demo_pair_says_what_to_read_in_ten_seconds(workflows, tmp_path, monkeypatch):
    """The recorded H200 pair (demo/) through the real gate and the real template: the summary line, the file
    the failing cases depend on, and the commands that reproduce them."""
    from mlagate import config, gate, gitops
    from mlagate.cli import demo

    monkeypatch.setattr(gitops, "REPO", demo.clone_with_the_pair(tmp_path / "repo"))
    gate.run_gate(config.load(), base_rev=demo.BASE, head_rev=demo.HEAD, results=demo.HISTORY,
                  out_dir=tmp_path / "gate", machine=demo.MACHINE)
    rc, body = comment(workflows, tmp_path / "c", artifact_zip((tmp_path / "gate" / "verdict.json").read_bytes()),
                       pr_head="c0ffee")
    assert rc == 0 and markdown_of_the_pr(body) == []
    assert ("**2 of 18 gated cases regressed (+7.16% to +11.17%); worst "
            "`tilelang-seesaw h=16 b=128 s=4096 float16 dense`.**") in body
    assert "Changed files the failing cases depend on: `kernels/mla_decode.py` (2)" in body
    assert (f"git checkout {demo.HEAD[:12]} && mlagate bench --grid quick --impl tilelang-seesaw --impl flash_mla "
            "--dtype float16") in body
    assert (f"mlagate gate --base {demo.BASE[:12]} --head {demo.HEAD[:12]} --machine h200 --confirm "
            "--record-missing") in body


def test_the_comment_names_a_workload_case_by_its_workload(workflows, tmp_path):
    ragged = {"case": ["tilelang-hopper", 64, 4096, "float16", 16, "ragged-4k@0139e575"], "status": "regression"}
    rc, body = comment(workflows, tmp_path, artifact_zip(json.dumps({**HOSTILE_VERDICT, "cases": [ragged]}).encode()))
    assert rc == 0 and "| `tilelang-hopper h=16 b=64 s=4096 float16 ragged-4k` | regression |" in body
