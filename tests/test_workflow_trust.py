"""Trust boundaries of the CI workflows and the compose file (CPU, always run; reads files, runs no Docker).

A pull request's code runs on the same self-hosted GPU runner, with the same Docker engine, as main's trusted
recordings. These tests read .github/workflows/*.yml and docker-compose.yml and fail when:

1. a pull_request job mounts the Docker socket, or runs a compose service that mounts it from files the
   pull request controls;
2. a pull_request job can write a Docker volume or image that a trusted job (push, schedule,
   workflow_dispatch) reads, or a trusted job uses the default (untrusted) scope, or a PR job pushes;
3. a job holding `contents: write` persists the token (checkout, git config) or hands it to more than
   one host-only step;
4. a workflow_run workflow does not check the triggering run's workflow path and repository, or posts
   the artifact's text without a size cap and with HTML in it;
5. a cleanup step runs on `!cancelled()` instead of `always()`;
6. a self-hosted job does not start from an empty workspace (a PR job: and end with one);
7. a trusted job downloads artifacts of another run or repository (a pull request's run can upload those).

Each rule is a function returning a list of violations; each test runs it on the real files (no violation)
and on a deliberately bad copy (the violation is found), so that every rule can fail.
"""

import copy
import os
import posixpath
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
WORKFLOWS = ROOT / ".github" / "workflows"
REPO = "owner/mlagate"

PR_EVENTS = {"pull_request", "pull_request_target"}
TRUSTED_EVENTS = {"push", "schedule", "workflow_dispatch"}
# Refs a pull_request job may check out as trusted code: the base branch, never the PR's head or merge.
TRUSTED_REFS = {"${{ github.event.pull_request.base.sha }}", "${{ github.event.pull_request.base.ref }}",
                "${{ github.base_ref }}"}
# Values a PR job may name its Docker resources after: none of them can be chosen by the pull request.
PR_SAFE_EXPRESSIONS = {"github.run_id", "github.run_attempt", "github.run_number",
                       "github.event.pull_request.number"}
WIPE = re.compile(r'^\s*(find "\$GITHUB_WORKSPACE" -mindepth 1 -delete|rm -rf "\$GITHUB_WORKSPACE"/?\S*)\s*$')
CLEANUP = re.compile(r"\bchown\b|docker (volume|image|container) rm\b|docker rmi\b|docker rm\b|"
                     r"compose\b[^\n]*\bdown\b|-mindepth 1 -delete|\brm -rf\b")
TOKEN = re.compile(r"github\.token|secrets\.GITHUB_TOKEN")


def load_workflows():
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(WORKFLOWS.glob("*.yml"))}


def load_compose():
    return yaml.safe_load(COMPOSE.read_text())


def triggers(workflow) -> dict:
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on:` key as True
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return on or {}


def is_pr(workflow):
    return bool(PR_EVENTS & set(triggers(workflow)))


def is_trusted(workflow):
    return not is_pr(workflow) and bool(TRUSTED_EVENTS & set(triggers(workflow)))


def jobs(workflows):
    for file, workflow in workflows.items():
        for name, job in (workflow.get("jobs") or {}).items():
            yield file, workflow, name, job


def steps(job):
    return job.get("steps") or []


def step_label(file, job_name, step):
    return f"{file}:{job_name}:{step.get('name') or step.get('uses') or step.get('run', '')[:40]}"


def is_checkout(step):
    return str(step.get("uses", "")).startswith("actions/checkout@")


def is_wipe(step):
    return bool(WIPE.match(step.get("run", "")))


def self_hosted(job):
    return "self-hosted" in str(job.get("runs-on", ""))


def env_of(workflow, job, step=None):
    return {k: str(v) for k, v in {**(workflow.get("env") or {}), **(job.get("env") or {}),
                                   **((step or {}).get("env") or {})}.items()}


# --- compose: interpolation, services, volumes ---------------------------------------------------------

VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}|\$(\w+)")


def interpolate(text, env):
    """Compose's variable syntax: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, $$."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group(1) or m.group(4), m.group(2), m.group(3)
        value = env.get(name)
        if op == ":-" and not value or op == "-" and value is None:
            return default
        return value or ""
    return VARIABLE.sub(sub, str(text))


def service_mounts(service):
    """(source, read_only) of every mount of a service, short or long syntax."""
    for v in service.get("volumes") or []:
        if isinstance(v, str):
            parts = v.split(":")
            yield parts[0], len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            yield str(v.get("source", "")), bool(v.get("read_only"))


def mounts_docker_socket(service):
    return any("docker.sock" in source for source, _ in service_mounts(service))


def named_volumes(compose, service, env):
    """(volume name as Docker sees it, read_only) of the named volumes a service mounts."""
    declared = compose.get("volumes") or {}
    project = interpolate(compose.get("name", "default"), env)
    for source, read_only in service_mounts(service):
        if not source or source.startswith((".", "/", "~", "$")):
            continue  # a bind mount
        spec = declared.get(source) or {}
        name = spec.get("name") or (source if spec.get("external") else f"{project}_{source}")
        yield interpolate(name, env), read_only


# --- workflows: the docker compose calls in a run script ------------------------------------------------

GLOBAL_WITH_VALUE = {"-f", "--file", "-p", "--project-name", "--profile", "--project-directory",
                     "--env-file", "--ansi", "--progress", "--parallel"}
SUB_WITH_VALUE = {"-e", "--env", "-v", "--volume", "-w", "--workdir", "--name", "--entrypoint", "-u", "--user",
                  "-p", "--publish", "-l", "--label", "--pull", "--cap-add", "--cap-drop", "--scale", "-t",
                  "--timeout", "--exit-code-from", "--attach", "--no-attach", "--wait-timeout", "--env-from-file"}


def compose_calls(script, all_services):
    """Every `docker compose` / `docker-compose` call of a script: dicts with the subcommand, the services
    it acts on, the extra -v mounts and the directory of the compose file it reads."""
    calls = []
    script = script.replace("\\\n", " ")
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for m in re.finditer(r"\bdocker(?:\s+compose\b|-compose\b)(.*)", line):
            rest = re.split(r"\s(?:&&|\|\||;|\|)\s", m.group(1))[0]
            try:
                words = shlex.split(rest, comments=True)
            except ValueError:  # a quote that closes on a later line
                words = rest.split()
            call = {"cmd": None, "services": [], "mounts": [], "dir": "."}
            i = 0
            while i < len(words) and words[i].startswith("-"):  # global options
                option = words[i].split("=", 1)[0]
                value = words[i].split("=", 1)[1] if "=" in words[i] else None
                if option in GLOBAL_WITH_VALUE and value is None:
                    i += 1
                    value = words[i] if i < len(words) else ""
                if option in ("-f", "--file"):
                    call["dir"] = posixpath.dirname(value) or "."
                elif option == "--project-directory":
                    call["dir"] = value
                i += 1
            if i == len(words):
                continue
            call["cmd"], positional = words[i], []
            i += 1
            while i < len(words):
                word = words[i]
                if word.startswith("-") and not (positional and call["cmd"] in ("run", "exec")):
                    option = word.split("=", 1)[0]
                    value = word.split("=", 1)[1] if "=" in word else None
                    if option in SUB_WITH_VALUE and value is None:
                        i += 1
                        value = words[i] if i < len(words) else ""
                    if option in ("-v", "--volume"):
                        call["mounts"].append(value)
                elif call["cmd"] in ("run", "exec"):
                    positional.append(word)
                    if len(positional) == 1:
                        call["services"] = [word]
                else:
                    positional.append(word)
                i += 1
            if call["cmd"] not in ("run", "exec"):
                call["services"] = positional or [name for name, s in all_services.items()
                                                  if not s.get("profiles")]
            calls.append(call)
    return calls


def workspace_owners(job, pr_job):
    """(step, {checkout path: 'trusted' | 'untrusted'}) for each step: whose files each checked-out folder
    holds when the step runs. In a pull_request job only a checkout of the base, into a workspace no PR
    code has been in since the last wipe, is trusted; files no checkout put there are not."""
    owners, tainted = {}, False
    for step in steps(job):
        yield step, dict(owners)
        if is_wipe(step):
            owners, tainted = {}, False
        elif is_checkout(step):
            with_ = step.get("with") or {}
            path = posixpath.normpath(str(with_.get("path") or "."))
            trusted = not pr_job or (str(with_.get("ref", "")).strip() in TRUSTED_REFS
                                     and "repository" not in with_ and not tainted)
            owners[path] = "trusted" if trusted else "untrusted"
            tainted = tainted or not trusted


def owner_of(owners, directory):
    directory = posixpath.normpath(directory)
    matches = [p for p in owners if p == "." or directory == p or directory.startswith(p + "/")]
    return owners[max(matches, key=len)] if matches else "untrusted"


# --- rule 1: the Docker socket --------------------------------------------------------------------------


def socket_violations(workflows, compose):
    services = compose["services"]
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        if not is_pr(workflow):
            continue
        for step, owners in workspace_owners(job, pr_job=True):
            script = step.get("run", "")
            where = step_label(file, job_name, step)
            if "docker.sock" in script:
                found.append(f"{where}: a pull_request job mounts the Docker socket")
            for call in compose_calls(script, services):
                if any("docker.sock" in m for m in call["mounts"]):
                    found.append(f"{where}: a pull_request job mounts the Docker socket")
                if call["cmd"] not in ("run", "exec", "up", "create", "start"):
                    continue
                directory = posixpath.join(step.get("working-directory", "."), call["dir"])
                if owner_of(owners, directory) == "trusted":
                    continue
                for name in call["services"]:
                    if name in services and mounts_docker_socket(services[name]):
                        found.append(f"{where}: runs compose service {name!r}, which mounts the Docker socket, "
                                     "from files the pull request controls")
    return found


# --- rule 2: what a PR job writes, a trusted job must not read ----------------------------------------------


def docker_resources(workflow, job, compose):
    """(writes, reads) of a job: {volume or image name: where}. Writes: volumes mounted read-write, images
    built; reads: every volume mounted, every image run."""
    services = compose["services"]
    writes, reads = {}, {}
    for step in steps(job):
        env = env_of(workflow, job, step)
        for call in compose_calls(step.get("run", ""), services):
            for name in call["services"]:
                service = services.get(name)
                if service is None:
                    continue
                image = interpolate(service.get("image", ""), env) if service.get("image") else None
                if call["cmd"] == "build" or (call["cmd"] in ("run", "up", "create") and service.get("build")):
                    if image:
                        writes[f"image {image}"] = name
                if call["cmd"] in ("run", "up", "create", "start", "exec"):
                    if image:
                        reads[f"image {image}"] = name
                    for volume, read_only in named_volumes(compose, service, env):
                        reads[f"volume {volume}"] = name
                        if not read_only:
                            writes[f"volume {volume}"] = name
    return writes, reads


def cache_violations(workflows, compose):
    found, pr_writes, trusted_reads = [], {}, {}
    for file, workflow, job_name, job in jobs(workflows):
        where = f"{file}:{job_name}"
        writes, reads = docker_resources(workflow, job, compose)
        if is_pr(workflow):
            pr_writes.update({r: where for r in writes})
            for resource in writes:
                for expression in re.findall(r"\$\{\{\s*(.*?)\s*\}\}", resource):
                    if expression not in PR_SAFE_EXPRESSIONS:
                        found.append(f"{where}: names {resource} after ${{{{ {expression} }}}}, "
                                     "which the pull request can choose")
            for step in steps(job):
                script = step.get("run", "")
                if re.search(r"\bgit\b[^\n]*\bpush\b", script) or (
                        "results push" in script and "--no-push" not in script):
                    found.append(f"{step_label(file, job_name, step)}: a pull_request job pushes")
            perms = job.get("permissions", workflow.get("permissions"))
            if perms is None or perms == "write-all" or (isinstance(perms, dict) and "write" in perms.values()):
                found.append(f"{where}: a pull_request job holds a write token")
        elif is_trusted(workflow):
            trusted_reads.update({r: where for r in reads})
            # A trusted job that forgets the scope variable must not land on the names an unset variable
            # gives: those are the untrusted scope's.
            default = docker_resources({}, {"steps": [{"run": s.get("run", "")} for s in steps(job)]}, compose)[1]
            for resource in set(reads) & set(default):
                found.append(f"{where}: uses {resource}, the default (untrusted) scope's name")
    for resource in sorted(set(pr_writes) & set(trusted_reads)):
        found.append(f"{pr_writes[resource]} writes {resource}, which {trusted_reads[resource]} reads")
    return found


# --- rule 3: the write token ----------------------------------------------------------------------------


def holds_contents_write(workflow, job):
    perms = job.get("permissions", workflow.get("permissions"))
    if perms is None:
        return True  # the repository's default token permissions may be read-write
    if isinstance(perms, str):
        return perms == "write-all"
    return perms.get("contents") == "write"


def credential_violations(workflows):
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        if not holds_contents_write(workflow, job):
            continue
        for scope, env in (("workflow", workflow.get("env")), ("job", job.get("env"))):
            if any(TOKEN.search(str(v)) for v in (env or {}).values()):
                found.append(f"{file}:{job_name}: the token is in the {scope}'s env, so every step gets it")
        for step in steps(job):
            where = step_label(file, job_name, step)
            with_ = step.get("with") or {}
            if is_checkout(step) and with_.get("persist-credentials") not in (False, "false"):
                found.append(f"{where}: checkout persists the token in .git/config (persist-credentials)")
            script = step.get("run", "")
            if re.search(r"\bgit\s+config\b[^\n]*(extraheader|credential|insteadof)", script, re.I) or \
                    re.search(r"git-credentials|\bgit\s+remote\s+(add|set-url)\b[^\n]*@", script):
                found.append(f"{where}: writes a credential to disk")
            if TOKEN.search(str(step.get("env", ""))) and re.search(r"\bdocker\b", script):
                found.append(f"{where}: a step holding the token runs a container")
    return found


# --- rule 4: workflow_run ------------------------------------------------------------------------------


def evaluate(condition, github):
    """A job's `if:` over the github context; only ==, !=, &&, ||, !, parentheses, quoted strings and
    github.* properties: anything else fails the test so that it is rewritten."""
    condition = re.sub(r"^\s*\$\{\{(.*)\}\}\s*$", r"\1", condition, flags=re.S)

    def lookup(match):
        value = github
        for key in match.group(0).split(".")[1:]:
            value = value.get(key) if isinstance(value, dict) else None
        return repr(value)

    expr = re.sub(r"github(\.[A-Za-z_]+)+", lookup, condition)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    leftover = re.sub(r"'[^']*'|None|==|!=|\band\b|\bor\b|\bnot\b|[()\s]", "", expr)
    assert not leftover, f"the condition uses more than this test can evaluate: {leftover!r}"
    return bool(eval(expr, {"__builtins__": {}}))  # only comparisons of literals remain


def workflow_run_violations(workflows):
    found = []
    names = {w.get("name"): f".github/workflows/{file}" for file, w in workflows.items()}
    for file, workflow, job_name, job in jobs(workflows):
        on = triggers(workflow)
        if "workflow_run" not in on:
            continue
        where = f"{file}:{job_name}"
        for source in on["workflow_run"].get("workflows") or []:
            path = names.get(source)
            if path is None:
                found.append(f"{where}: no workflow here is named {source!r}")
                continue
            run = {"event": "pull_request", "path": path, "repository": {"full_name": REPO},
                   "head_repository": {"full_name": "someone/fork"}}
            cases = [
                ("a genuine run for a fork's pull request", run, True),
                ("a run of another workflow file with the same name",
                 {**run, "path": ".github/workflows/forged.yml"}, False),
                ("a run in another repository", {**run, "repository": {"full_name": "someone/fork"}}, False),
                ("a run that is not a pull request's", {**run, "event": "push"}, False),
            ]
            for what, event_run, wanted in cases:
                github = {"event": {"workflow_run": event_run}, "repository": REPO}
                if evaluate(str(job.get("if", "'run' == 'run'")), github) != wanted:
                    found.append(f"{where}: {'rejects' if wanted else 'accepts'} {what}")
    return found


def comment_body(script, tmp_path, gate_md: bytes, pr_head="c0ffee"):
    """Run a posting step's script as the runner would (bash -e -o pipefail) with a fake `gh` whose pull
    request 12 is at pr_head, for a gated commit c0ffee; returns the body it posted (None if none)."""
    (tmp_path / "perf-gate").mkdir(parents=True)
    (tmp_path / "perf-gate" / "pr-number").write_text("12\n")
    (tmp_path / "perf-gate" / "gate.md").write_bytes(gate_md)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "gh"
    fake.write_text('#!/usr/bin/env bash\n'
                    'if [ "$1 $2" = "pr view" ]; then echo "$PR_HEAD"; exit 0; fi\n'
                    'if [ "$1 $2" = "pr comment" ]; then\n'
                    '  while [ $# -gt 0 ]; do if [ "$1" = --body-file ]; then cp "$2" "$POSTED"; fi; shift; done\n'
                    '  exit 0\nfi\nexit 3\n')
    fake.chmod(0o755)
    posted = tmp_path / "posted.md"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HEAD_SHA": "c0ffee", "PR_HEAD": pr_head,
           "POSTED": str(posted), "RUN_ID": "1", "GH_TOKEN": "x", "GH_REPO": REPO}
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return posted.read_bytes() if posted.exists() else None


HOSTILE_GATE_MD = (b"## perf gate: **pass**\n<img src=x onerror=alert(1)>\n<!-- hidden -->\x00\x1b[31m\n"
                   + b"filler <b>line</b>\n" * 20000)


def comment_violations(script, tmp_path):
    body = comment_body(script, tmp_path, HOSTILE_GATE_MD)
    if body is None:
        return ["posted nothing"]
    found = []
    if len(body) > 65536:
        found.append(f"posted {len(body)} bytes of untrusted text (cap: 64 KiB)")
    if b"<" in body:
        found.append("posted untrusted HTML (a '<' got through)")
    if re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", body):
        found.append("posted control characters")
    if b"&lt;img" not in body:
        found.append("dropped the text instead of escaping it")
    return found


# --- rule 5: cleanup ---------------------------------------------------------------------------------


def cleanup_violations(workflows):
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        for index, step in enumerate(steps(job)):
            if index == 0 or not CLEANUP.search(step.get("run", "")):
                continue  # a job's first step cleans up before anything ran: nothing to skip it
            condition = str(step.get("if", ""))
            if "always()" not in condition or "cancelled()" in condition:
                found.append(f"{step_label(file, job_name, step)}: a cleanup step runs on "
                             f"{condition or 'success()'}, not always()")
    return found


# --- rule 6: the workspace -----------------------------------------------------------------------------


def workspace_violations(workflows):
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        job_steps = steps(job)
        if not self_hosted(job) or not any(is_checkout(s) for s in job_steps):
            continue
        where = f"{file}:{job_name}"
        if not is_wipe(job_steps[0]):
            found.append(f"{where}: does not start from an empty workspace (first step: "
                         f"{step_label(file, job_name, job_steps[0])})")
        if is_pr(workflow) and not (is_wipe(job_steps[-1]) and "always()" in str(job_steps[-1].get("if", ""))):
            found.append(f"{where}: does not end (always()) by emptying the workspace its containers wrote")
    return found


# --- rule 7: artifacts ----------------------------------------------------------------------------------

FOREIGN_ARTIFACT_INPUTS = {"run-id", "github-token", "repository"}  # download-artifact: another run's
OWN_RUN = re.compile(r'\bgh\s+run\s+download\s+"?\$\{?GITHUB_RUN_ID\}?"?(?=\s|$)')


def artifact_downloads(job):
    """(step, how) of each artifact download of a job: the download-artifact action or `gh run download`."""
    for step in steps(job):
        if str(step.get("uses", "")).startswith("actions/download-artifact@"):
            yield step, "action"
        for _ in re.finditer(r"\bgh\s+run\s+download\b", step.get("run", "")):
            yield step, "gh"


def artifact_violations(workflows):
    """A trusted job loads artifacts of its own run only: any other run's may be a pull request's."""
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        if not is_trusted(workflow):
            continue
        for step, how in artifact_downloads(job):
            where = step_label(file, job_name, step)
            foreign = sorted(FOREIGN_ARTIFACT_INPUTS & set(step.get("with") or {})) if how == "action" else []
            if foreign:
                found.append(f"{where}: downloads artifacts of another run or repository ({', '.join(foreign)})")
            script = step.get("run", "")
            if how == "gh" and (len(OWN_RUN.findall(script)) != len(re.findall(r"\bgh\s+run\s+download\b", script))
                                or re.search(r"\s(-R|--repo)\b", script)):
                found.append(f"{where}: `gh run download` of another run than $GITHUB_RUN_ID")
    return found


# --- tests ---------------------------------------------------------------------------------------------


@pytest.fixture
def workflows():
    return load_workflows()


@pytest.fixture
def compose():
    return load_compose()


def find_step(job, pattern):
    (step,) = [s for s in steps(job) if re.search(pattern, str(s.get("name", "")) + str(s.get("run", "")))]
    return step


def test_the_parsers_see_what_the_workflows_do(workflows, compose):
    # The rules below are only as good as these: check them on the real files.
    services = compose["services"]
    pr_job = workflows["perf-pr.yml"]["jobs"]["gate"]
    calls = [c for s in steps(pr_job) for c in compose_calls(s.get("run", ""), services)]
    assert {("build", "gpus"), ("run", "gpus"), ("build", "bench"), ("run", "bench"), ("run", "test"),
            ("run", "shell")} <= {(c["cmd"], s) for c in calls for s in c["services"]}
    owners = {s.get("name") or s.get("uses"): o for s, o in workspace_owners(pr_job, pr_job=True)}
    assert owners["Check the GPUs are idle (the base's mlagate gpus)"] == {".": "trusted"}
    assert owners["GPU tests"]["."] == "untrusted"
    assert compose_calls('docker compose -f b/docker-compose.yml run --rm -e A=1 --no-deps gpus chown x',
                         services) == [{"cmd": "run", "services": ["gpus"], "mounts": [], "dir": "b"}]
    env = {"MLAGATE_SCOPE": "trusted"}
    assert dict(named_volumes(compose, services["bench"], env)) == {
        "mlagate_trusted_results": False, "mlagate_trusted_tilelang-cache": False,
        "mlagate_trusted_aiter-jit": False}
    assert dict(named_volumes(compose, services["bench"], {}))["mlagate_untrusted_tilelang-cache"] is False
    assert interpolate("a${X:-d}b${Y-e}$$", {"X": "", "Y": ""}) == "adb$"


# 1. The Docker socket.

def test_no_pr_job_gets_the_docker_socket(workflows, compose):
    assert socket_violations(workflows, compose) == []
    assert mounts_docker_socket(compose["services"]["gpus"])  # what makes the rule matter


def test_socket_rule_catches_the_prs_own_gpus_service(workflows, compose):
    # The insecure version: the GPU check ran the PR's compose file, after the PR's checkout.
    bad = copy.deepcopy(workflows)
    job = bad["perf-pr.yml"]["jobs"]["gate"]
    job["steps"].insert(job["steps"].index(find_step(job, r"^GPU tests")),
                        {"name": "Check the GPUs are idle", "run": "docker compose run --rm gpus"})
    assert any("'gpus'" in v for v in socket_violations(bad, compose))


def test_socket_rule_catches_a_base_checkout_after_pr_code_ran(workflows, compose):
    # The base's files in a workspace the PR's containers already wrote (.git hooks) are not trusted:
    # the same base-checkout-and-check steps, moved after the PR's code ran, are caught.
    bad = copy.deepcopy(workflows)
    job = bad["perf-pr.yml"]["jobs"]["gate"]
    first = job["steps"].index(find_step(job, r"^Check out the base commit"))
    last = job["steps"].index(find_step(job, r"^Give the base checkout back"))
    block = job["steps"][first:last + 1]
    del job["steps"][first:last + 1]
    job["steps"][-1:-1] = block
    assert any("Check the GPUs are idle" in v and "'gpus'" in v for v in socket_violations(bad, compose))


def test_socket_rule_catches_a_direct_socket_mount(workflows, compose):
    bad = copy.deepcopy(workflows)
    bad["perf-pr.yml"]["jobs"]["gate"]["steps"].append(
        {"run": "docker run --rm -v /var/run/docker.sock:/var/run/docker.sock busybox true"})
    assert socket_violations(bad, compose)


# 2. Volumes, images and the results history.

def test_pr_jobs_write_nothing_a_trusted_job_reads(workflows, compose):
    assert cache_violations(workflows, compose) == []


def test_cache_rule_catches_shared_volumes_and_image(workflows, compose):
    # The insecure version: one set of volume names (and one image tag) for every run.
    bad = copy.deepcopy(compose)
    for spec in bad["volumes"].values():
        spec.pop("name", None)
    for service in bad["services"].values():
        if "image" in service:
            service["image"] = re.sub(r":.*", ":local", service["image"])
    violations = cache_violations(workflows, bad)
    for resource in ("volume mlagate_tilelang-cache", "volume mlagate_aiter-jit", "volume mlagate_results",
                     "image mlagate-rocm:local"):
        assert any(f"writes {resource}," in v for v in violations), resource


def test_cache_rule_catches_a_trusted_job_on_the_default_scope(workflows, compose):
    bad = copy.deepcopy(workflows)
    del bad["perf-main.yml"]["jobs"]["record"]["env"]["MLAGATE_SCOPE"]
    violations = cache_violations(bad, compose)
    assert any("volume mlagate_untrusted_aiter-jit, the default (untrusted)" in v for v in violations)


def test_cache_rule_catches_a_pr_job_in_the_trusted_scope(workflows, compose):
    for scope in ("trusted", "${{ github.head_ref }}"):
        bad = copy.deepcopy(workflows)
        bad["perf-pr.yml"]["jobs"]["gate"]["env"]["MLAGATE_SCOPE"] = scope
        assert cache_violations(bad, compose), scope


def test_cache_rule_catches_a_pr_job_that_pushes_results(workflows, compose):
    bad = copy.deepcopy(workflows)
    bad["perf-pr.yml"]["jobs"]["gate"]["steps"].append(
        {"run": "docker compose run --rm shell mlagate results push --branch perf-results"})
    assert any("pushes" in v for v in cache_violations(bad, compose))
    bad = copy.deepcopy(workflows)
    bad["perf-pr.yml"]["jobs"]["gate"]["permissions"] = {"contents": "write"}
    assert any("write token" in v for v in cache_violations(bad, compose))


# 3. The write token.

def test_jobs_with_contents_write_never_persist_the_token(workflows):
    assert credential_violations(workflows) == []
    assert holds_contents_write(workflows["perf-main.yml"], workflows["perf-main.yml"]["jobs"]["record"])


def test_credential_rule_catches_a_persisted_checkout(workflows):
    # The insecure version: actions/checkout's default (persist-credentials: true) in perf-main.
    bad = copy.deepcopy(workflows)
    for step in bad["perf-main.yml"]["jobs"]["record"]["steps"]:
        if is_checkout(step):
            del step["with"]["persist-credentials"]
    assert any("persist-credentials" in v for v in credential_violations(bad))


def test_credential_rule_catches_a_token_on_disk_in_env_or_in_a_container(workflows):
    record = lambda w: w["perf-main.yml"]["jobs"]["record"]  # noqa: E731
    bad = copy.deepcopy(workflows)
    record(bad)["steps"].append({"env": {"T": "${{ github.token }}"},
                                 "run": 'git config http.https://github.com/.extraheader "AUTHORIZATION: $T"'})
    assert any("to disk" in v for v in credential_violations(bad))
    bad = copy.deepcopy(workflows)
    record(bad)["env"]["GH_TOKEN"] = "${{ github.token }}"
    assert any("job's env" in v for v in credential_violations(bad))
    bad = copy.deepcopy(workflows)
    push = find_step(record(bad), r"^Push the results")
    push["run"] = "docker compose run --rm -e PUSH_TOKEN shell mlagate results push\n" + push["run"]
    assert any("runs a container" in v for v in credential_violations(bad))


def test_the_push_step_hands_the_token_to_git_only(workflows, tmp_path):
    # The credential helper of the push step, run by a real git: it answers `get` with the token from the
    # environment and leaves nothing in the repository's config.
    step = find_step(workflows["perf-main.yml"]["jobs"]["record"], r"^Push the results")
    helper = re.search(r"-c '(credential\.helper=![^']*)'", step["run"]).group(1)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    out = subprocess.run(["git", "-c", "credential.helper=", "-c", helper, "credential", "fill"], cwd=tmp_path,
                         input="protocol=https\nhost=github.com\n\n", capture_output=True, text=True,
                         env={**os.environ, "PUSH_TOKEN": "t0ken", "GIT_TERMINAL_PROMPT": "0"})
    assert out.returncode == 0, out.stderr
    assert "username=x-access-token\n" in out.stdout and "password=t0ken\n" in out.stdout
    assert "t0ken" not in (tmp_path / ".git" / "config").read_text()


# 4. workflow_run.

def test_comment_workflow_accepts_only_perf_pr_of_this_repository(workflows):
    assert workflow_run_violations(workflows) == []


def test_workflow_run_rule_catches_a_name_only_match(workflows):
    # The insecure version: only the event was checked, so any workflow named perf-pr could post.
    bad = copy.deepcopy(workflows)
    bad["perf-comment.yml"]["jobs"]["comment"]["if"] = "github.event.workflow_run.event == 'pull_request'"
    violations = workflow_run_violations(bad)
    assert any("another workflow file" in v for v in violations)
    assert any("another repository" in v for v in violations)


def test_workflow_run_rule_catches_the_head_repository_check(workflows):
    # head_repository is the fork for a fork's pull request: checking it rejects genuine runs.
    bad = copy.deepcopy(workflows)
    job = bad["perf-comment.yml"]["jobs"]["comment"]
    job["if"] = job["if"].replace("workflow_run.repository.", "workflow_run.head_repository.")
    assert any("rejects a genuine run" in v for v in workflow_run_violations(bad))


def post_step(workflows):
    return find_step(workflows["perf-comment.yml"]["jobs"]["comment"], r"gh pr comment")


def test_the_comment_is_capped_escaped_text(workflows, tmp_path):
    assert comment_violations(post_step(workflows)["run"], tmp_path) == []


# The insecure version's posting script: capped, but HTML and control characters went through.
OLD_POST_SCRIPT = """\
pr=$(head -c 16 perf-gate/pr-number)
head=$(gh pr view "$pr" --json headRefOid --jq .headRefOid)
if [ "$head" != "$HEAD_SHA" ]; then exit 0; fi
head -c 60000 perf-gate/gate.md > body.md
gh pr comment "$pr" --body-file body.md
"""


def test_comment_rule_catches_html_and_an_uncapped_body(tmp_path):
    violations = comment_violations(OLD_POST_SCRIPT, tmp_path / "a")
    assert any("HTML" in v for v in violations) and any("control" in v for v in violations)
    uncapped = OLD_POST_SCRIPT.replace("head -c 60000 perf-gate/gate.md", "sed 's/</\\&lt;/g' perf-gate/gate.md")
    assert any("64 KiB" in v for v in comment_violations(uncapped, tmp_path / "b"))


def test_the_comment_is_not_posted_for_another_commit(workflows, tmp_path):
    body = comment_body(post_step(workflows)["run"], tmp_path, b"pass\n", pr_head="d1ffe7")
    assert body is None


# 5. Cleanup.

def test_cleanup_steps_run_always(workflows):
    assert cleanup_violations(workflows) == []
    # The rule sees the cleanup steps it is about.
    names = [s.get("name") for _, _, _, j in jobs(workflows) for i, s in enumerate(steps(j))
             if i and CLEANUP.search(s.get("run", ""))]
    # perf-pr's gate, perf-main's shard and record, tune's tune
    assert names.count("Give the workspace back to the runner user") == 4


def test_cleanup_rule_catches_not_cancelled(workflows):
    # The insecure version: `if: ${{ !cancelled() }}`, skipped when a newer push cancels the run.
    bad = copy.deepcopy(workflows)
    find_step(bad["perf-pr.yml"]["jobs"]["gate"], r"^Give the workspace back")["if"] = "${{ !cancelled() }}"
    find_step(bad["perf-main.yml"]["jobs"]["record"], r"^Give the workspace back").pop("if")
    violations = cleanup_violations(bad)
    assert any("perf-pr.yml" in v and "!cancelled()" in v for v in violations)
    assert any("perf-main.yml" in v and "success()" in v for v in violations)


# 6. The workspace.

def test_self_hosted_jobs_start_from_an_empty_workspace(workflows):
    assert workspace_violations(workflows) == []


def test_workspace_rule_catches_a_reused_workspace(workflows):
    # The insecure version: perf-main's first step was the checkout, into a workspace (.git included)
    # that the previous PR job's containers could write.
    bad = copy.deepcopy(workflows)
    bad["perf-main.yml"]["jobs"]["record"]["steps"].pop(0)
    bad["perf-pr.yml"]["jobs"]["gate"]["steps"].pop()
    violations = workspace_violations(bad)
    assert any("perf-main.yml" in v and "start" in v for v in violations)
    assert any("perf-pr.yml" in v and "end" in v for v in violations)


# 7. Artifacts.

def test_trusted_jobs_load_artifacts_of_their_own_run_only(workflows):
    assert artifact_violations(workflows) == []
    # The rule sees the downloads it is about: the record job's shards and the culprit job's bisect.
    main = workflows["perf-main.yml"]["jobs"]
    assert [how for _, how in artifact_downloads(main["record"])] == ["action"]
    assert [how for _, how in artifact_downloads(main["culprit"])] == ["gh"]


def test_artifact_rule_catches_a_download_from_another_run(workflows):
    # The insecure versions: the shards (or the bisect) fetched from a run named by an input or a variable,
    # which may be a pull request's run of the same workflow file.
    bad = copy.deepcopy(workflows)
    step = find_step(bad["perf-main.yml"]["jobs"]["record"], r"^Download the shards")
    step["with"].update({"run-id": "${{ inputs.run }}", "github-token": "${{ github.token }}"})
    assert any("Download the shards" in v and "github-token, run-id" in v for v in artifact_violations(bad))
    for run in ('"$RUN_ID"', '"$GITHUB_RUN_ID" -R someone/fork'):
        bad = copy.deepcopy(workflows)
        step = find_step(bad["perf-main.yml"]["jobs"]["culprit"], r"gh run download")
        step["run"] = step["run"].replace('gh run download "$GITHUB_RUN_ID"', f"gh run download {run}")
        assert any("another run" in v for v in artifact_violations(bad)), run


# The weekly re-tune (tune.yml): trusted, on main's GPU runner, under the rules above.

def test_the_tune_workflow_is_trusted_and_runs_on_mains_runner(workflows, compose):
    tune = workflows["tune.yml"]
    assert set(triggers(tune)) == {"schedule", "workflow_dispatch"} and is_trusted(tune)
    job = tune["jobs"]["tune"]
    assert job["runs-on"] == workflows["perf-main.yml"]["jobs"]["record"]["runs-on"]
    assert not holds_contents_write(tune, job)
    assert "mlagate tune --check" in find_step(job, r"mlagate tune")["run"]
    reads = docker_resources(tune, job, compose)[1]
    assert {"image mlagate-rocm:trusted", "volume mlagate_trusted_tilelang-cache"} <= set(reads)


def test_the_rules_catch_a_tune_workflow_opened_to_pull_requests(workflows, compose):
    # The insecure versions: tune.yml on pull_request keeps the trusted scope (a PR's code then writes the
    # kernel cache main's records load) and never empties the workspace it leaves; or it forgets the scope.
    bad = copy.deepcopy(workflows)
    bad["tune.yml"].pop(True)  # YAML 1.1 reads the `on:` key as True
    bad["tune.yml"]["on"] = {"pull_request": None}
    assert any("tune.yml:tune writes" in v for v in cache_violations(bad, compose))
    assert any("tune.yml:tune" in v and "end" in v for v in workspace_violations(bad))
    bad = copy.deepcopy(workflows)
    del bad["tune.yml"]["jobs"]["tune"]["env"]["MLAGATE_SCOPE"]
    assert any("tune.yml:tune: uses" in v and "untrusted" in v for v in cache_violations(bad, compose))


# -- a dispatched run is main's code: workflow_dispatch runs whatever ref it is given ---------------

MAIN_ONLY = "github.ref == 'refs/heads/main'"


def dispatch_violations(workflows):
    """Self-hosted jobs of a workflow_dispatch workflow that run without the job, or a job it needs, being
    limited to refs/heads/main (a dispatch on another branch would run unreviewed code as trusted)."""
    out = []
    for file, workflow, name, job in jobs(workflows):
        if "workflow_dispatch" not in triggers(workflow) or not self_hosted(job):
            continue
        needs = job.get("needs") or []
        chain = [job, *(workflow["jobs"][n] for n in ([needs] if isinstance(needs, str) else needs))]
        if not any(MAIN_ONLY in str(j.get("if", "")) for j in chain):
            out.append(f"{file}:{name}")
    return out


def test_dispatched_self_hosted_jobs_run_mains_code_only(workflows):
    assert dispatch_violations(workflows) == []
    assert any("workflow_dispatch" in triggers(w) for w in workflows.values())  # the rule has work to do


def test_dispatch_rule_catches_a_job_without_the_ref_check(workflows):
    broken = copy.deepcopy(workflows)
    del broken["tune.yml"]["jobs"]["tune"]["if"]
    assert dispatch_violations(broken) == ["tune.yml:tune"]
