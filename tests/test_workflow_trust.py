"""Trust boundaries of the CI workflows and the compose file (CPU, always run; reads files, runs no Docker).

A pull request's code runs as root in containers on a self-hosted GPU runner, beside main's trusted
recordings. These tests read .github/workflows/*.yml and docker-compose.yml and fail when:

1. a pull_request job mounts the Docker socket, or runs a compose service that mounts it from files the
   pull request controls;
2. a pull_request job can write a Docker volume or image that a trusted job (push, schedule,
   workflow_dispatch) reads, or a trusted job uses the default (untrusted) scope, or a PR job pushes;
3. a job holding `contents: write` persists the token, hands it to more than one step, to a step that runs
   a container, or pushes with git from the workspace;
4. a workflow_run workflow does not check the triggering run's workflow path and repository;
5. a cleanup step runs on `!cancelled()` instead of `always()`;
6. a self-hosted job does not start and end with the workspace emptied as root from the pinned image
   (a runner-user `find -delete` or `rm -rf "$GITHUB_WORKSPACE"/*` keeps a read-only .git);
7. a trusted job downloads artifacts of another run or repository (a pull request's run can upload those);
8. a compose call reads a compose file, override or .env that a checkout or a container put in the
   workspace, instead of the copy kept before any container ran (`-f`, `--env-file /dev/null`,
   `--project-directory`), or builds without `--pull`;
9. a service a PR job runs gets more than one GPU, the network, host IPC, an unconfined seccomp profile,
   privileges, MKNOD, a host path, or an extra mount;
10. a host step reads what containers wrote other than through copy-outputs, or runs git there;
11. a self-hosted PR job runs without the approval environment, checks out a branch instead of the
    event's commit, or the trigger accepts pull requests into another branch;
12. a self-hosted job is not in its runner group (PR: mlagate-pr; trusted: mlagate-trusted);
13. an image is pinned by neither digest nor an entry of DIGEST_TODO.

Each rule is a function returning a list of violations; each test runs it on the real files (no violation)
and on a deliberately bad copy (the violation is found), so that every rule can fail. What these rules
model, tests/test_host_steps.py runs for real (the wipe, the output copy, the push, the comment).
"""

import copy
import posixpath
import re

import pytest
import yaml

from workflow_helpers import (
    COMPOSE,
    REPO,
    ROOT,
    TRUSTED_COPY,
    compose_calls,
    compose_sources,
    env_of,
    evaluate,
    find_step,
    interpolate,
    interpolate_all,
    is_bind,
    is_checkout,
    is_pr,
    is_trusted,
    jobs,
    load_compose,
    load_workflows,
    merge,
    mounts_docker_socket,
    named_volumes,
    pr_jobs,
    script_lines,
    self_hosted,
    self_hosted_jobs,
    service_mounts,
    step_label,
    steps,
    triggers,
)

# Refs a pull_request job may check out as trusted code: the base branch, never the PR's head or merge.
TRUSTED_REFS = {"${{ github.event.pull_request.base.sha }}", "${{ github.event.pull_request.base.ref }}",
                "${{ github.base_ref }}"}
# What a PR job may check out as the PR: a commit the event fixed (what was approved), never a branch.
EVENT_COMMITS = {"${{ github.sha }}", "${{ github.event.pull_request.head.sha }}"}
# Values a PR job may name its Docker resources after: none of them can be chosen by the pull request.
PR_SAFE_EXPRESSIONS = {"github.run_id", "github.run_attempt", "github.run_number",
                       "github.event.pull_request.number"}
# The one way to empty a workspace: as root, from the pinned image, everything (.git too) whatever its mode.
WIPE = ('docker run --rm --network none --pull always --user 0:0 --cap-drop ALL --cap-add DAC_OVERRIDE '
        '--cap-add FOWNER --volume "$GITHUB_WORKSPACE:/workspace" "$WIPE_IMAGE" find /workspace -mindepth 1 -delete')
CLEANUP = re.compile(r"\bchown\b|docker (volume|image|container) rm\b|docker rmi\b|docker rm\b|"
                     r"compose\b[^\n]*\bdown\b|-mindepth 1 -delete|\brm -rf\b")
TOKEN = re.compile(r"github\.token|secrets\.GITHUB_TOKEN")
RUNNER_GROUPS = {"pr": "mlagate-pr", "trusted": "mlagate-trusted"}
PR_ENVIRONMENT = "perf-pr"
# Images pinned by tag only, each with why: a digest must be read from the registry (`docker buildx
# imagetools inspect <tag>`), and none of these registries is reachable from the machines this was
# written on. Pin one and remove it here: the test fails while this table lists a pinned image.
DIGEST_TODO = {
    "rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0": "Docker Hub not reachable here",
    "pytorch/pytorch:2.14.1-cuda13.2-cudnn9-devel": "Docker Hub not reachable here",
    "debian:bookworm-slim": "Docker Hub not reachable here (WIPE_IMAGE)",
}
# What containers write in the workspace, which a host step reads only through copy-outputs.
CONTAINER_OUTPUTS = re.compile(r"(?<![\w/$.-])(out/|out\b|\.asv/|shard-store\b|shards/)")


def is_wipe(step):
    return " ".join(step.get("run", "").split()) == WIPE


def starts_containers(step):
    script = step.get("run", "")
    return not is_wipe(step) and (bool(re.search(r"\bdocker\s+run\b", script)) or any(
        c["cmd"] in ("run", "up", "create", "start", "exec") for c in compose_calls(script, {})))


def keeps_trusted_copy(step):
    return re.search(r"\bcp\b[^\n]*docker-compose\.yml[^\n]*\$RUNNER_TEMP/trusted", step.get("run", "")) is not None


def workspace_timeline(job, pr_job):
    """(step, state) for each step, state as the step starts: "owners" {checkout path: 'trusted' |
    'untrusted'}, "copy": whose files the $RUNNER_TEMP/trusted copy holds (None: no copy yet), "ran": a
    container ran since the last wipe. In a pull_request job only a checkout of the base, into a workspace
    no PR code has been in since the last wipe, is trusted; a copy is trusted only when made from trusted
    files before any container ran."""
    state = {"owners": {}, "copy": None, "ran": False}
    tainted = False
    for step in steps(job):
        yield step, {**state, "owners": dict(state["owners"])}
        if is_wipe(step):
            state["owners"], state["ran"], tainted = {}, False, False
        elif is_checkout(step):
            with_ = step.get("with") or {}
            path = posixpath.normpath(str(with_.get("path") or "."))
            trusted = not pr_job or (str(with_.get("ref", "")).strip() in TRUSTED_REFS
                                     and "repository" not in with_ and not tainted)
            state["owners"][path] = "trusted" if trusted else "untrusted"
            tainted = tainted or not trusted
        elif keeps_trusted_copy(step):
            state["copy"] = "untrusted" if state["ran"] else owner_of(state["owners"], ".")
        if starts_containers(step):
            state["ran"] = True


def owner_of(owners, directory):
    directory = posixpath.normpath(directory)
    matches = [p for p in owners if p == "." or directory == p or directory.startswith(p + "/")]
    return owners[max(matches, key=len)] if matches else "untrusted"


def config_owner(call, state):
    """Whose files decide a compose call's containers: 'trusted' only if every file Compose reads is."""
    files, env_file, _ = compose_sources(call, {}, {"docker-compose.yml": ""})
    owners = set()
    for where, path in files + ([env_file] if env_file else []):
        if where == "workspace":
            owners.add(owner_of(state["owners"], posixpath.dirname(path) or "."))
        elif path.startswith(TRUSTED_COPY + "/"):
            owners.add(state["copy"] or "untrusted")
        else:
            owners.add("untrusted")
    return "trusted" if owners == {"trusted"} else "untrusted"


# --- rule 1: the Docker socket --------------------------------------------------------------------------


def socket_violations(workflows, compose):
    services = compose["services"]
    found = []
    for file, workflow, job_name, job in pr_jobs(workflows):
        for step, state in workspace_timeline(job, pr_job=True):
            script = step.get("run", "")
            where = step_label(file, job_name, step)
            if "docker.sock" in script:
                found.append(f"{where}: a pull_request job mounts the Docker socket")
            for call in compose_calls(script, services):
                if call["cmd"] not in ("run", "exec", "up", "create", "start"):
                    continue
                if config_owner(call, state) == "trusted" and owner_of(state["owners"], ".") == "trusted":
                    continue
                for name in call["services"]:
                    if name in services and mounts_docker_socket(services[name]):
                        found.append(f"{where}: runs compose service {name!r}, which mounts the Docker socket, "
                                     "where the pull request's files are")
    return found


# --- rule 2: what a PR job writes, a trusted job must not read ----------------------------------------------


def docker_resources(workflow, job, compose):
    """(writes, reads) of a job: {volume or image name: where}. Writes: volumes mounted read-write (by the
    service or an extra -v), images built; reads: every volume mounted, every image run."""
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
                    extra = [(interpolate(m.split(":")[0], env), m.count(":") > 1 and m.endswith(":ro"))
                             for m in call["mounts"] if not is_bind(m)]
                    for volume, read_only in [*named_volumes(compose, service, env), *extra]:
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
                if re.search(r"\bgit\b[^\n]*\bpush\b", script) or "push-results" in script or (
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
        holders = [s for s in steps(job) if TOKEN.search(str(s.get("env", "")) + str(s.get("with", "")))]
        if len(holders) > 1:
            found.append(f"{file}:{job_name}: {len(holders)} steps get the token "
                         f"({', '.join(str(s.get('name') or s.get('uses')) for s in holders)}); one may")
        for step in steps(job):
            where = step_label(file, job_name, step)
            with_ = step.get("with") or {}
            if is_checkout(step) and with_.get("persist-credentials") not in (False, "false"):
                found.append(f"{where}: checkout persists the token in .git/config (persist-credentials)")
            script = step.get("run", "")
            if re.search(r"\bgit\s+config\b[^\n]*(extraheader|credential|insteadof)", script, re.I) or \
                    re.search(r"git-credentials|\bgit\s+remote\s+(add|set-url)\b[^\n]*@", script):
                found.append(f"{where}: writes a credential to disk")
            if step in holders and re.search(r"\bdocker\b", script):
                found.append(f"{where}: a step holding the token runs a container")
            if step in holders and re.search(r"(^|[;&|(\s])git\s", script):
                found.append(f"{where}: a step holding the token runs git in the workspace, whose .git "
                             "containers wrote (push from a new repository: push-results)")
    return found


# --- rule 4: workflow_run ------------------------------------------------------------------------------


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


# --- rule 5: cleanup ---------------------------------------------------------------------------------


def cleanup_violations(workflows):
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        for index, step in enumerate(steps(job)):
            if index == 0 or not (CLEANUP.search(step.get("run", "")) or is_wipe(step)):
                continue  # a job's first step cleans up before anything ran: nothing to skip it
            if is_wipe(step) and any(is_checkout(s) for s in steps(job)[index + 1:]):
                continue  # a wipe between two checkouts: the job goes on only through it
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
            found.append(f"{where}: does not start from a workspace emptied as root (first step: "
                         f"{step_label(file, job_name, job_steps[0])})")
        if not (is_wipe(job_steps[-1]) and "always()" in str(job_steps[-1].get("if", ""))):
            found.append(f"{where}: does not end (always()) by emptying, as root, the workspace its containers wrote")
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


# --- rule 8: compose reads the copy kept before any container ran ------------------------------------------


def compose_config_violations(workflows):
    found = []
    for file, workflow, job_name, job in self_hosted_jobs(workflows):
        for step, state in workspace_timeline(job, pr_job=is_pr(workflow)):
            where = step_label(file, job_name, step)
            for call in compose_calls(step.get("run", ""), {}):
                if not call["files"] or not all(f.startswith(TRUSTED_COPY + "/") for f in call["files"]):
                    found.append(f"{where}: compose reads a file of the workspace (-f {call['files'] or 'none'}: "
                                 "the checkout's docker-compose.yml and any docker-compose.override.yml beside it)")
                elif state["copy"] != "trusted":
                    found.append(f"{where}: the copy in {TRUSTED_COPY} was not made from trusted files "
                                 "before any container ran")
                if call["env_file"] != "/dev/null":
                    found.append(f"{where}: compose reads the project folder's .env (COMPOSE_FILE, variables): "
                                 "give --env-file /dev/null")
                if call["project_dir"] != "$GITHUB_WORKSPACE":
                    found.append(f"{where}: no --project-directory \"$GITHUB_WORKSPACE\": `.` would be the "
                                 "copy's folder, which the containers would then mount")
                if call["cmd"] == "build" and "--pull" not in call["options"]:
                    found.append(f"{where}: builds without --pull (a base image tag left on the host is reused)")
    return found


# --- rule 9: what a PR's containers get ------------------------------------------------------------------

ALLOWED_DEVICE = re.compile(r"^(/dev/kfd|/dev/dri/renderD\d+)(:\S+)?$")


def container_violations(name, service):
    """What a service gives its containers beyond one GPU, its checkout and its volumes."""
    found = []
    bad = lambda what: found.append(f"service {name!r}: {what}")  # noqa: E731
    if service.get("privileged"):
        bad("privileged")
    if service.get("cap_add"):
        bad(f"cap_add {service['cap_add']}")
    if not {"MKNOD", "ALL"} & set(service.get("cap_drop") or []):
        bad("keeps MKNOD: a device node made in the checkout opens a host device for whoever reads it there")
    options = [str(o).replace("=", ":") for o in service.get("security_opt") or []]
    if any("unconfined" in o or o.startswith("label:disable") for o in options):
        bad(f"security_opt {service['security_opt']}: not Docker's default confinement")
    if "no-new-privileges:true" not in options:
        bad("no no-new-privileges:true")
    if service.get("ipc") != "private":
        bad(f"ipc {service.get('ipc', 'the daemon default')}: not a private IPC namespace (the host's /dev/shm)")
    for key in ("pid", "uts", "userns_mode", "cgroup"):
        if str(service.get(key, "")) == "host" or str(service.get(key, "")).startswith("container:"):
            bad(f"{key}: {service[key]}")
    if service.get("network_mode") != "none" or service.get("networks"):
        bad(f"network_mode {service.get('network_mode', 'the default bridge')}: the network")
    devices = [str(d) for d in service.get("devices") or []]
    render = [d for d in devices if "renderD" in d]
    if any(not ALLOWED_DEVICE.match(d) for d in devices) or len(render) > 1:
        bad(f"devices {devices}: more than /dev/kfd and one render node")
    reservations = ((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
    if service.get("gpus") or any(d.get("count") == "all" for d in reservations.get("devices") or []):
        bad("every GPU of the host")
    for source, target, _ in service_mounts(service):
        if is_bind(source) and (source, target) != (".", "/workspace"):
            bad(f"mounts the host's {source}")
    for key in ("volumes_from", "device_cgroup_rules", "sysctls"):
        if service.get(key):
            bad(f"{key}: {service[key]}")
    return found


def pr_container_violations(workflows, compose):
    """Every service a PR job runs where the PR's files are, as the compose file it reads defines it."""
    services = compose["services"]
    found = []
    for file, workflow, job_name, job in pr_jobs(workflows):
        for step, state in workspace_timeline(job, pr_job=True):
            if owner_of(state["owners"], ".") == "trusted":
                continue
            where = step_label(file, job_name, step)
            for call in compose_calls(step.get("run", ""), services):
                if call["cmd"] not in ("run", "up", "create", "start", "exec"):
                    continue
                for option in {"-v", "--volume", "--cap-add", "--privileged", "--device"} & set(call["options"]):
                    found.append(f"{where}: `docker compose {call['cmd']} {option}` gives the PR's container more")
                env = env_of(workflow, job, step)
                for name in call["services"]:
                    if name in services:
                        service = interpolate_all(services[name], env)
                        found += [f"{where}: {v}" for v in container_violations(name, service)]
    return found


def effective_services(call, shell_env, workspace, trusted_compose):
    """The services one compose call runs, as Compose builds them from what it reads: the kept copy
    (``trusted_compose``), or the workspace's files (``workspace``: name -> text), merged, interpolated."""
    files, _, variables = compose_sources(call, shell_env, workspace)
    merged = {}
    for where, path in files:
        text = trusted_compose if path.startswith(TRUSTED_COPY + "/") else workspace.get(path)
        if text is not None:
            merged = merge(merged, yaml.safe_load(text) or {})
    return interpolate_all(merged.get("services") or {}, variables)


# --- rule 10: host steps never read what containers wrote ---------------------------------------------------


def host_read_violations(workflows):
    found = []
    for file, workflow, job_name, job in self_hosted_jobs(workflows):
        for step, state in workspace_timeline(job, pr_job=is_pr(workflow)):
            where = step_label(file, job_name, step)
            uses = str(step.get("uses", ""))
            if re.match(r"actions/upload-(pages-)?artifact@", uses):
                path = str((step.get("with") or {}).get("path", ""))
                if not path.startswith("${{ runner.temp }}/"):
                    found.append(f"{where}: uploads {path} (it follows symlinks): upload copy-outputs' copy")
            if not state["ran"] or "run" not in step or is_wipe(step):
                continue
            for line in script_lines(step["run"]):
                if re.search(r"\bdocker\b", line):
                    continue  # the line runs a container; what it names is read there
                line = re.sub(r"\bcopy-outputs\"?(\s+--[\w-]+\s+\S+)*\s+\S+", "copy-outputs", line)  # its SRC
                if CONTAINER_OUTPUTS.search(line):
                    found.append(f"{where}: reads what containers wrote ({line.strip()[:60]}): read the copy")
                if re.search(r"(^|[;&|(\s])git\s", line):
                    found.append(f"{where}: runs git on the host in the workspace, whose .git containers wrote")
    return found


# --- rule 11: approval that binds the code ------------------------------------------------------------------


def approval_violations(workflows):
    found = []
    for file, workflow, job_name, job in jobs(workflows):
        if not is_pr(workflow) or not self_hosted(job):
            continue
        where = f"{file}:{job_name}"
        environment = job.get("environment")
        name = environment.get("name") if isinstance(environment, dict) else environment
        if name != PR_ENVIRONMENT:
            found.append(f"{where}: runs without the {PR_ENVIRONMENT!r} environment (its required reviewers "
                         "approve each run)")
        for step in steps(job):
            ref = str((step.get("with") or {}).get("ref", "")).strip()
            if is_checkout(step) and ref not in TRUSTED_REFS and ref != "perf-results" and ref not in EVENT_COMMITS:
                found.append(f"{step_label(file, job_name, step)}: checks out {ref or 'the default ref'}, not "
                             "the commit the event fixed (a push after the approval would run)")
        pull_request = triggers(workflow).get("pull_request") or {}
        if pull_request.get("branches") != ["main"] or "branches-ignore" in pull_request:
            found.append(f"{file}: pull_request is not limited to pull requests into main (branches: [main])")
        if "pull_request_target" in triggers(workflow):
            found.append(f"{file}: pull_request_target runs the PR's code with the base's secrets")
    return found


# --- rule 12: runner groups -----------------------------------------------------------------------------------


def runner_group_violations(workflows):
    found = []
    for file, workflow, job_name, job in self_hosted_jobs(workflows):
        runs_on = job.get("runs-on")
        group = runs_on.get("group") if isinstance(runs_on, dict) else None
        wanted = RUNNER_GROUPS["pr" if is_pr(workflow) else "trusted"]
        if group != wanted:
            found.append(f"{file}:{job_name}: runs in runner group {group!r}, not {wanted!r} (labels are no boundary)")
    return found


# --- rule 13: image pins ---------------------------------------------------------------------------------------


def image_references(workflows, dockerfiles):
    refs = {f"{p.name}: ARG BASE_IMAGE": m for p in dockerfiles
            for m in re.findall(r"^ARG BASE_IMAGE=(\S+)$", p.read_text(), re.M)}
    for file, workflow in workflows.items():
        for key, value in (workflow.get("env") or {}).items():
            if key.endswith("_IMAGE"):
                refs[f"{file}: env {key}"] = str(value)
    return refs


def pin_violations(workflows, dockerfiles):
    found = []
    unpinned = set()
    for where, image in image_references(workflows, dockerfiles).items():
        if re.search(r"@sha256:[0-9a-f]{64}$", image):
            continue
        unpinned.add(image)
        if image not in DIGEST_TODO:
            found.append(f"{where}: {image} is pinned by tag only; pin @sha256 (or list it in DIGEST_TODO, why)")
    found += [f"DIGEST_TODO lists {image}, which nothing uses by tag any more" for image in set(DIGEST_TODO) - unpinned]
    return found


# --- tests ---------------------------------------------------------------------------------------------


@pytest.fixture
def workflows():
    return load_workflows()


@pytest.fixture
def compose():
    return load_compose()


DOCKERFILES = [ROOT / "Dockerfile.rocm", ROOT / "Dockerfile.cuda"]


def pr_job(workflows):
    return workflows["perf-pr.yml"]["jobs"]["gate"]


def test_the_parsers_see_what_the_workflows_do(workflows, compose):
    # The rules below are only as good as these: check them on the real files.
    services = compose["services"]
    job = pr_job(workflows)
    calls = [c for s in steps(job) for c in compose_calls(s.get("run", ""), services)]
    assert {("build", "gpus"), ("run", "gpus"), ("build", "pr-bench"), ("run", "pr-bench"), ("run", "pr-test"),
            ("run", "pr-shell")} <= {(c["cmd"], s) for c in calls for s in c["services"]}
    states = {s.get("name") or s.get("uses"): st for s, st in workspace_timeline(job, pr_job=True)}
    assert states["Check the GPUs are idle (the base's mlagate gpus)"]["owners"] == {".": "trusted"}
    assert states["Check the GPUs are idle (the base's mlagate gpus)"]["copy"] == "trusted"
    assert states["GPU tests"]["owners"]["."] == "untrusted" and states["GPU tests"]["copy"] == "trusted"
    assert states["Job summary"]["ran"] and not states["Check out the pull request (the approved commit)"]["ran"]
    assert sum(is_wipe(s) for s in steps(job)) == 3  # first, between base and PR, last
    (call,) = compose_calls('docker compose -f b/docker-compose.yml --env-file /dev/null run --rm -e A=1 '
                            '--no-deps -v x:/y gpus chown x', services)
    assert (call["cmd"], call["services"], call["files"], call["env_file"], call["mounts"]) == (
        "run", ["gpus"], ["b/docker-compose.yml"], "/dev/null", ["x:/y"])
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
    # The insecure version: the GPU check ran after the PR's checkout.
    bad = copy.deepcopy(workflows)
    job = pr_job(bad)
    check = copy.deepcopy(find_step(job, r"^Check the GPUs are idle"))
    job["steps"].insert(job["steps"].index(find_step(job, r"^GPU tests")), check)
    assert any("'gpus'" in v for v in socket_violations(bad, compose))


def test_socket_rule_catches_a_base_checkout_after_pr_code_ran(workflows, compose):
    # The base's files in a workspace the PR's containers already wrote (.git hooks) are not trusted:
    # the same base-checkout-and-check steps, moved after the PR's code ran, are caught.
    bad = copy.deepcopy(workflows)
    job = pr_job(bad)
    first = job["steps"].index(find_step(job, r"^Check out the base commit"))
    last = job["steps"].index(find_step(job, r"^Check the GPUs are idle"))
    block = job["steps"][first:last + 1]
    del job["steps"][first:last + 1]
    job["steps"][-1:-1] = block
    assert any("Check the GPUs are idle" in v and "'gpus'" in v for v in socket_violations(bad, compose))


def test_socket_rule_catches_a_direct_socket_mount(workflows, compose):
    bad = copy.deepcopy(workflows)
    pr_job(bad)["steps"].append({"run": "docker run --rm -v /var/run/docker.sock:/var/run/docker.sock busybox true"})
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


def test_cache_rule_catches_an_extra_trusted_volume_on_a_pr_run(workflows, compose):
    bad = copy.deepcopy(workflows)
    step = find_step(pr_job(bad), r"^GPU tests")
    step["run"] = step["run"].replace("run --rm pr-test", "run --rm -v mlagate_trusted_tilelang-cache:/cache/t pr-test")
    assert any("perf-pr.yml:gate writes volume mlagate_trusted_tilelang-cache, which" in v
               for v in cache_violations(bad, compose))


def test_cache_rule_catches_a_trusted_job_on_the_default_scope(workflows, compose):
    bad = copy.deepcopy(workflows)
    del bad["perf-main.yml"]["jobs"]["record"]["env"]["MLAGATE_SCOPE"]
    violations = cache_violations(bad, compose)
    assert any("volume mlagate_untrusted_aiter-jit, the default (untrusted)" in v for v in violations)


def test_cache_rule_catches_a_pr_job_in_the_trusted_scope(workflows, compose):
    for scope in ("trusted", "${{ github.head_ref }}"):
        bad = copy.deepcopy(workflows)
        pr_job(bad)["env"]["MLAGATE_SCOPE"] = scope
        assert cache_violations(bad, compose), scope


def test_cache_rule_catches_a_pr_job_that_pushes_results(workflows, compose):
    bad = copy.deepcopy(workflows)
    pr_job(bad)["steps"].append({"run": "docker compose run --rm shell mlagate results push --branch perf-results"})
    assert any("pushes" in v for v in cache_violations(bad, compose))
    bad = copy.deepcopy(workflows)
    pr_job(bad)["permissions"] = {"contents": "write"}
    assert any("write token" in v for v in cache_violations(bad, compose))


# 3. The write token.

def record_job(workflows):
    return workflows["perf-main.yml"]["jobs"]["record"]


def test_jobs_with_contents_write_never_persist_the_token(workflows):
    assert credential_violations(workflows) == []
    assert holds_contents_write(workflows["perf-main.yml"], record_job(workflows))


def test_credential_rule_catches_a_persisted_checkout(workflows):
    # The insecure version: actions/checkout's default (persist-credentials: true) in perf-main.
    bad = copy.deepcopy(workflows)
    for step in record_job(bad)["steps"]:
        if is_checkout(step):
            del step["with"]["persist-credentials"]
    assert any("persist-credentials" in v for v in credential_violations(bad))


def test_credential_rule_catches_a_token_on_disk_in_env_or_in_a_container(workflows):
    bad = copy.deepcopy(workflows)
    record_job(bad)["steps"].append({"env": {"T": "${{ github.token }}"},
                                     "run": 'git config http.https://github.com/.extraheader "AUTHORIZATION: $T"'})
    assert any("to disk" in v for v in credential_violations(bad))
    bad = copy.deepcopy(workflows)
    record_job(bad)["env"]["GH_TOKEN"] = "${{ github.token }}"
    assert any("job's env" in v for v in credential_violations(bad))
    bad = copy.deepcopy(workflows)
    push = find_step(record_job(bad), r"^Push the results")
    push["run"] = "docker compose run --rm -e PUSH_TOKEN shell mlagate results push\n" + push["run"]
    assert any("runs a container" in v for v in credential_violations(bad))


def test_credential_rule_catches_the_token_in_a_second_step(workflows):
    bad = copy.deepcopy(workflows)
    next(s for s in steps(record_job(bad)) if s.get("name") == "Report")["env"] = {"GH_TOKEN": "${{ github.token }}"}
    assert any("2 steps get the token" in v for v in credential_violations(bad))


# perf-main.yml at 9940045: the push ran git in the workspace, whose .git containers wrote.
OLD_PUSH_SCRIPT = """\
if ! git rev-parse --verify --quiet refs/heads/perf-results >/dev/null; then
  echo "::notice::no perf-results commit to push"; exit 0
fi
# shellcheck disable=SC2016 # $1 and $PUSH_TOKEN are expanded by the helper's shell, not here
git -c credential.helper= \\
  -c 'credential.helper=!f() { if [ "$1" = get ]; then printf "username=x-access-token\\npassword=%s\\n" "$PUSH_TOKEN"; fi; }; f' \\
  push "$(git remote get-url origin)" refs/heads/perf-results:refs/heads/perf-results
"""  # noqa: E501 (the old script, verbatim)


def test_credential_rule_catches_a_push_from_the_workspace(workflows):
    bad = copy.deepcopy(workflows)
    find_step(record_job(bad), r"^Push the results")["run"] = OLD_PUSH_SCRIPT
    assert any("runs git in the workspace" in v for v in credential_violations(bad))


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


# 5. Cleanup.

def test_cleanup_steps_run_always(workflows):
    assert cleanup_violations(workflows) == []
    # The rule sees the cleanup steps it is about: each self-hosted job's last wipe, perf-pr's removals.
    names = [s.get("name") for _, _, _, j in jobs(workflows) for i, s in enumerate(steps(j))
             if i and (CLEANUP.search(s.get("run", "")) or is_wipe(s))]
    assert names.count("Empty the workspace at the end") == 4  # perf-pr's gate, perf-main's shard and record, tune
    assert {"Stop this run's containers", "Remove this run's volumes and image"} <= set(names)


def test_cleanup_rule_catches_not_cancelled(workflows):
    # The insecure version: `if: ${{ !cancelled() }}`, skipped when a newer push cancels the run.
    bad = copy.deepcopy(workflows)
    find_step(pr_job(bad), r"^Remove this run's volumes")["if"] = "${{ !cancelled() }}"
    find_step(record_job(bad), r"^Empty the workspace at the end").pop("if")
    violations = cleanup_violations(bad)
    assert any("perf-pr.yml" in v and "!cancelled()" in v for v in violations)
    assert any("perf-main.yml" in v and "success()" in v for v in violations)


# 6. The workspace.

def test_self_hosted_jobs_start_and_end_with_a_root_wipe(workflows):
    assert workspace_violations(workflows) == []


def test_workspace_rule_catches_a_reused_workspace(workflows):
    # The insecure version: perf-main's first step was the checkout, into a workspace (.git included)
    # that the previous PR job's containers could write.
    bad = copy.deepcopy(workflows)
    record_job(bad)["steps"].pop(0)
    pr_job(bad)["steps"].pop()
    violations = workspace_violations(bad)
    assert any("perf-main.yml" in v and "start" in v for v in violations)
    assert any("perf-pr.yml" in v and "end" in v for v in violations)


@pytest.mark.parametrize("wipe", ['find "$GITHUB_WORKSPACE" -mindepth 1 -delete', 'rm -rf "$GITHUB_WORKSPACE"/*',
                                  WIPE.replace("--user 0:0", "--user 1001:1001"),
                                  WIPE.replace('"$WIPE_IMAGE"', '"mlagate-rocm:$MLAGATE_SCOPE"')])
def test_workspace_rule_catches_a_wipe_that_can_keep_git(workflows, wipe):
    # As the runner user, a folder a container made read-only (chmod 555 .git) keeps its files; the glob
    # skips .git altogether. tests/test_host_steps.py runs both for real.
    bad = copy.deepcopy(workflows)
    pr_job(bad)["steps"][-1]["run"] = wipe
    assert any("perf-pr.yml:gate: does not end" in v for v in workspace_violations(bad))


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
    step = find_step(record_job(bad), r"^Download the shards")
    step["with"].update({"run-id": "${{ inputs.run }}", "github-token": "${{ github.token }}"})
    assert any("Download the shards" in v and "github-token, run-id" in v for v in artifact_violations(bad))
    for run in ('"$RUN_ID"', '"$GITHUB_RUN_ID" -R someone/fork'):
        bad = copy.deepcopy(workflows)
        step = find_step(bad["perf-main.yml"]["jobs"]["culprit"], r"gh run download")
        step["run"] = step["run"].replace('gh run download "$GITHUB_RUN_ID"', f"gh run download {run}")
        assert any("another run" in v for v in artifact_violations(bad)), run


# 8. Compose reads the copy kept before any container ran.

def test_every_compose_call_reads_the_kept_copy_only(workflows):
    assert compose_config_violations(workflows) == []
    # The rule has work to do: every self-hosted job calls compose.
    assert all(any(compose_calls(s.get("run", ""), {}) for s in steps(j))
               for _, _, _, j in jobs(workflows) if self_hosted(j))


def test_compose_rule_catches_the_workspaces_files(workflows):
    # The insecure versions: bare `docker compose` (the PR's docker-compose.yml and any override file
    # beside it), no --env-file (the PR's .env: COMPOSE_FILE and every variable), no project folder.
    for old, new, what in [('-f "$RUNNER_TEMP/trusted/docker-compose.yml" --env-file /dev/null '
                            '--project-directory "$GITHUB_WORKSPACE" ', "", "a file of the workspace"),
                           ("--env-file /dev/null ", "", ".env"),
                           ('--project-directory "$GITHUB_WORKSPACE" ', "", "--project-directory"),
                           ("build --pull pr-bench", "build pr-bench", "--pull")]:
        bad = copy.deepcopy(workflows)
        for step in steps(pr_job(bad)):
            if "run" in step:
                step["run"] = step["run"].replace(old, new)
        assert any(what in v for v in compose_config_violations(bad)), what


def test_compose_rule_catches_a_copy_made_after_the_prs_checkout(workflows):
    bad = copy.deepcopy(workflows)
    job = pr_job(bad)
    keep = find_step(job, r"^Keep the base's compose file")
    job["steps"].remove(keep)
    job["steps"].insert(job["steps"].index(find_step(job, r"^Build the ROCm image")), keep)
    assert any("was not made from trusted files" in v for v in compose_config_violations(bad))


# Today's main (9940045) ran compose in the workspace after the PR's checkout; a pull request then adds
# these files. Compose reads an override beside docker-compose.yml, and .env's COMPOSE_FILE and variables.
HOSTILE_WORKSPACE = {
    "docker-compose.yml": COMPOSE.read_text(),
    "docker-compose.override.yml": "services:\n  pr-test:\n    privileged: true\n    volumes: "
                                   "['/:/host', '/run:/run', '/var/run/docker.sock:/var/run/docker.sock']\n",
    ".env": "COMPOSE_FILE=docker-compose.yml:evil.yml\nMLAGATE_PR_RENDER_NODE=/dev/sda\n",
    "evil.yml": "services:\n  pr-bench:\n    ipc: host\n    network_mode: host\n",
}


def pr_run_violations(workflows, workspace):
    """Each service a PR job runs after its checkout, as Compose would build it from what the call reads
    (the kept copy, or the workspace's files), checked against rule 9."""
    found = []
    job = pr_job(workflows)
    for step, state in workspace_timeline(job, pr_job=True):
        if owner_of(state["owners"], ".") == "trusted":
            continue
        env = env_of(workflows["perf-pr.yml"], job, step)
        for call in compose_calls(step.get("run", ""), {}):
            if call["cmd"] != "run":
                continue
            services = effective_services(call, env, workspace, COMPOSE.read_text())
            for name in call["services"]:
                found += [f"{step.get('name')}: {v}" for v in container_violations(name, services.get(name, {}))]
    return found


def test_no_file_of_the_pull_request_configures_its_containers(workflows):
    # Path 3 of issue 45: fails on 9940045, where the override file made pr-test privileged with / and the
    # socket mounted, and .env gave pr-bench the host's network and IPC and a host disk as its "GPU".
    assert pr_run_violations(workflows, HOSTILE_WORKSPACE) == []
    assert pr_run_violations(workflows, {}) == []


def test_the_compose_model_reads_what_compose_reads(workflows):
    # The insecure variants, each read as Compose reads it: without -f, the override; with no --env-file,
    # .env's variables; with .env's COMPOSE_FILE, its files.
    bare = {"cmd": "run", "files": [], "env_file": None, "project_dir": None, "services": ["pr-test"]}
    files, env_file, variables = compose_sources(bare, {}, HOSTILE_WORKSPACE)
    assert files == [("workspace", "docker-compose.yml"), ("workspace", "evil.yml")] and env_file
    assert variables["MLAGATE_PR_RENDER_NODE"] == "/dev/sda"
    without_env = {k: v for k, v in HOSTILE_WORKSPACE.items() if k != ".env"}
    files, _, _ = compose_sources(bare, {}, without_env)
    assert files == [("workspace", "docker-compose.yml"), ("workspace", "docker-compose.override.yml")]
    services = effective_services(bare, {}, without_env, "")
    assert services["pr-test"]["privileged"] is True and ("/:/host" in services["pr-test"]["volumes"])


def test_a_pull_request_configures_its_containers_on_the_old_workflow(workflows):
    # The same check on the old calls (bare `docker compose` after the PR's checkout) finds each variant.
    bad = copy.deepcopy(workflows)
    for step in steps(pr_job(bad)):
        if "run" in step:
            step["run"] = re.sub(r'-f "\$RUNNER_TEMP/trusted/docker-compose.yml" --env-file /dev/null\s+'
                                 r'--project-directory "\$GITHUB_WORKSPACE" ', "", step["run"])
    with_env = pr_run_violations(bad, HOSTILE_WORKSPACE)  # .env's COMPOSE_FILE: evil.yml, not the override
    for what in ("'pr-bench': ipc host", "'pr-bench': network_mode host", "/dev/sda"):
        assert any(what in v for v in with_env), what
    without_env = pr_run_violations(bad, {k: v for k, v in HOSTILE_WORKSPACE.items() if k != ".env"})
    for what in ("'pr-test': privileged", "mounts the host's /run", "docker.sock"):
        assert any(what in v for v in without_env), what
    assert any(v.endswith("'pr-test': mounts the host's /") for v in without_env)


# 9. What a PR's containers get.

def test_pr_containers_get_one_gpu_no_network_and_no_host_paths(workflows, compose):
    assert pr_container_violations(workflows, compose) == []
    services = compose["services"]
    assert all(container_violations(n, services[n]) for n in ("bench", "test", "shell", "gpus"))  # trusted ones
    assert services["pr-bench"]["command"] == services["bench"]["command"]


@pytest.mark.parametrize("change, what", [
    ({"privileged": True}, "privileged"),
    ({"volumes": [".:/workspace", "/:/host"]}, "mounts the host's /"),
    ({"volumes": [".:/workspace", "/run:/run"]}, "mounts the host's /run"),
    ({"volumes": [".:/workspace", "/var/run/docker.sock:/var/run/docker.sock"]}, "docker.sock"),
    ({"ipc": "host"}, "ipc host"),
    ({"security_opt": ["seccomp=unconfined", "no-new-privileges:true"]}, "unconfined"),
    ({"network_mode": "host"}, "network_mode host"),
    ({"devices": ["/dev/kfd", "/dev/dri"]}, "devices"),
    ({"devices": ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"]}, "devices"),
    ({"cap_drop": []}, "MKNOD"),
    ({"cap_add": ["SYS_ADMIN"]}, "cap_add"),
    ({"pid": "host"}, "pid"),
])
def test_pr_container_rule_catches_each_insecure_variant(workflows, compose, change, what):
    bad = copy.deepcopy(compose)
    bad["services"]["pr-bench"].update(change)
    assert any(what in v for v in pr_container_violations(workflows, bad)), what


def test_pr_container_rule_catches_a_trusted_service_or_an_extra_mount(workflows, compose):
    bad = copy.deepcopy(workflows)
    step = find_step(pr_job(bad), r"^GPU tests")
    step["run"] = step["run"].replace("run --rm pr-test", "run --rm test")
    assert any("'test': ipc host" in v for v in pr_container_violations(bad, compose))
    bad = copy.deepcopy(workflows)
    step = find_step(pr_job(bad), r"^GPU tests")
    step["run"] = step["run"].replace("run --rm pr-test", "run --rm -v /home:/home pr-test")
    assert any("-v" in v for v in pr_container_violations(bad, compose))


# 10. Host steps never read what containers wrote.

def test_host_steps_read_only_the_copy(workflows):
    assert host_read_violations(workflows) == []


# perf-pr.yml at 9940045: the summary and the artifacts read out/ in the workspace, symlinks and all.
OLD_SUMMARY_SCRIPT = 'if [ -f out/gate/gate.md ]; then cat out/gate/gate.md >> "$GITHUB_STEP_SUMMARY"; fi\n'


def test_host_read_rule_catches_the_workspaces_outputs(workflows):
    bad = copy.deepcopy(workflows)
    find_step(pr_job(bad), r"^Job summary")["run"] = OLD_SUMMARY_SCRIPT
    assert any("Job summary: reads what containers wrote" in v for v in host_read_violations(bad))
    bad = copy.deepcopy(workflows)
    step = find_step(pr_job(bad), r"^Note the pull request number")
    step["run"] = 'mkdir -p out/gate && echo "$PR_NUMBER" > out/gate/pr-number'
    assert host_read_violations(bad)
    bad = copy.deepcopy(workflows)
    next(s for s in steps(pr_job(bad)) if "upload-artifact" in str(s.get("uses")))["with"]["path"] = "out/gate/"
    assert any("uploads out/gate/" in v for v in host_read_violations(bad))
    bad = copy.deepcopy(workflows)
    find_step(workflows["tune.yml"]["jobs"]["tune"], r"^Job summary")  # exists
    find_step(bad["tune.yml"]["jobs"]["tune"], r"^Job summary")["run"] = "cat out/tune/*/*/*/tune.md"
    assert any("tune.yml" in v for v in host_read_violations(bad))


# 11. Approval that binds the code.

def test_pr_jobs_need_an_approval_that_binds_the_commit(workflows):
    assert approval_violations(workflows) == []
    checkout = find_step(pr_job(workflows), r"^Check out the pull request")
    assert checkout["with"]["ref"] in EVENT_COMMITS


def test_approval_rule_catches_each_insecure_variant(workflows):
    bad = copy.deepcopy(workflows)
    del pr_job(bad)["environment"]
    assert any("environment" in v for v in approval_violations(bad))
    for ref in (None, "${{ github.head_ref }}", "${{ github.event.pull_request.head.ref }}"):
        bad = copy.deepcopy(workflows)
        with_ = find_step(pr_job(bad), r"^Check out the pull request")["with"]
        with_.pop("ref") if ref is None else with_.update(ref=ref)
        assert any("not the commit the event fixed" in v for v in approval_violations(bad)), ref
    bad = copy.deepcopy(workflows)
    del triggers(bad["perf-pr.yml"])["pull_request"]["branches"]
    assert any("into main" in v for v in approval_violations(bad))


# 12. Runner groups.

def test_self_hosted_jobs_run_in_their_runner_group(workflows):
    assert runner_group_violations(workflows) == []


def test_runner_group_rule_catches_a_shared_pool(workflows):
    # The insecure version: PR and trusted jobs on the same labels, no group.
    bad = copy.deepcopy(workflows)
    pr_job(bad)["runs-on"] = record_job(bad)["runs-on"]
    record_job(bad)["runs-on"] = ["self-hosted", "linux", "gfx942"]
    violations = runner_group_violations(bad)
    assert any("perf-pr.yml:gate" in v and "'mlagate-trusted'" in v for v in violations)
    assert any("perf-main.yml:record" in v and "None" in v for v in violations)


def test_runner_check_knows_the_workflows_groups():
    from mlagate.measure.runner import GROUPS

    assert GROUPS == RUNNER_GROUPS


# 13. Image pins.

def test_images_are_pinned_by_digest_or_listed_as_todo(workflows):
    assert pin_violations(workflows, DOCKERFILES) == []
    assert len(image_references(workflows, DOCKERFILES)) == 5  # two base images, three WIPE_IMAGEs
    assert len({v for k, v in image_references(workflows, DOCKERFILES).items() if "WIPE_IMAGE" in k}) == 1


def test_pin_rule_catches_a_new_tag_and_a_stale_todo(workflows, tmp_path):
    bad = copy.deepcopy(workflows)
    bad["tune.yml"]["env"]["WIPE_IMAGE"] = "busybox:latest"
    assert any("busybox:latest is pinned by tag only" in v for v in pin_violations(bad, DOCKERFILES))
    pinned = tmp_path / "Dockerfile.rocm"
    pinned.write_text(DOCKERFILES[0].read_text().replace(
        "ARG BASE_IMAGE=rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0",
        "ARG BASE_IMAGE=rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0@sha256:" + "0" * 64))
    assert any("DIGEST_TODO lists rocm/pytorch" in v for v in pin_violations(workflows, [pinned, DOCKERFILES[1]]))


# The weekly re-tune (tune.yml): trusted, on main's GPU runner, under the rules above.

def test_the_tune_workflow_is_trusted_and_runs_on_mains_runner(workflows, compose):
    tune = workflows["tune.yml"]
    assert set(triggers(tune)) == {"schedule", "workflow_dispatch"} and is_trusted(tune)
    job = tune["jobs"]["tune"]
    assert job["runs-on"] == record_job(workflows)["runs-on"]
    assert not holds_contents_write(tune, job)
    assert "mlagate tune --check" in find_step(job, r"mlagate tune")["run"]
    reads = docker_resources(tune, job, compose)[1]
    assert {"image mlagate-rocm:trusted", "volume mlagate_trusted_tilelang-cache"} <= set(reads)


def test_the_rules_catch_a_tune_workflow_opened_to_pull_requests(workflows, compose):
    # The insecure versions: tune.yml on pull_request keeps the trusted scope (a PR's code then writes the
    # kernel cache main's records load) and main's runner group; or it forgets the scope.
    bad = copy.deepcopy(workflows)
    bad["tune.yml"].pop(True)  # YAML 1.1 reads the `on:` key as True
    bad["tune.yml"]["on"] = {"pull_request": None}
    assert any("tune.yml:tune writes" in v for v in cache_violations(bad, compose))
    assert any("tune.yml:tune" in v for v in runner_group_violations(bad))
    assert any("tune.yml:tune" in v for v in approval_violations(bad))
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
