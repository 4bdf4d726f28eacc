"""What tests/test_workflow_trust.py, tests/test_host_steps.py and tests/test_containers.py read out of the
workflows and the compose file, in one place: loading them, the GitHub `if:` evaluator, Compose's variable
syntax, the `docker compose` calls of a `run:` script and which files such a call makes Compose load."""

import posixpath
import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
WORKFLOWS = ROOT / ".github" / "workflows"
SCRIPTS = ROOT / ".github" / "scripts"
REPO = "owner/mlagate"

PR_EVENTS = {"pull_request", "pull_request_target"}
TRUSTED_EVENTS = {"push", "schedule", "workflow_dispatch"}
# Where a job keeps the compose file and host scripts it checked out, before any container ran.
TRUSTED_COPY = "$RUNNER_TEMP/trusted"


def load_yaml(path):
    return yaml.safe_load(Path(path).read_text())


def load_workflows():
    return {p.name: load_yaml(p) for p in sorted(WORKFLOWS.glob("*.yml"))}


def load_compose():
    return load_yaml(COMPOSE)


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


def find_step(job, pattern):
    (step,) = [s for s in steps(job) if re.search(pattern, str(s.get("name", "")) + str(s.get("run", "")))]
    return step


def is_checkout(step):
    return str(step.get("uses", "")).startswith("actions/checkout@")


def self_hosted(job):
    return "self-hosted" in str(job.get("runs-on", ""))


def pr_jobs(workflows):
    """jobs(), those of the workflows pull requests trigger only: where the PR's code runs."""
    return ((file, workflow, name, job) for file, workflow, name, job in jobs(workflows) if is_pr(workflow))


def self_hosted_jobs(workflows):
    """jobs(), the self-hosted ones only: the jobs the runner-boundary rules are about."""
    return ((file, workflow, name, job) for file, workflow, name, job in jobs(workflows) if self_hosted(job))


def env_of(workflow, job, step=None):
    return {k: str(v) for k, v in {**(workflow.get("env") or {}), **(job.get("env") or {}),
                                   **((step or {}).get("env") or {})}.items()}


def evaluate(condition, github) -> bool:
    """A job's `if:` over the github context; only ==, !=, &&, ||, !, parentheses, quoted strings and
    github.* properties: anything else fails the test so that it is rewritten."""
    condition = re.sub(r"^\s*\$\{\{(.*)\}\}\s*$", r"\1", str(condition), flags=re.S)

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


def interpolate_all(value, env):
    if isinstance(value, dict):
        return {k: interpolate_all(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate_all(v, env) for v in value]
    return interpolate(value, env) if isinstance(value, str) else value


def service_mounts(service):
    """(source, target, read_only) of every mount of a service, short or long syntax."""
    for v in service.get("volumes") or []:
        if isinstance(v, str):
            parts = v.split(":")
            yield parts[0], parts[1] if len(parts) > 1 else parts[0], len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            yield str(v.get("source", "")), str(v.get("target", "")), bool(v.get("read_only"))


def mounts_docker_socket(service):
    return any("docker.sock" in source for source, _, _ in service_mounts(service))


def is_bind(source):
    return source.startswith((".", "/", "~", "$"))


def named_volumes(compose, service, env):
    """(volume name as Docker sees it, read_only) of the named volumes a service mounts."""
    declared = compose.get("volumes") or {}
    project = interpolate(compose.get("name", "default"), env)
    for source, _, read_only in service_mounts(service):
        if not source or is_bind(source):
            continue
        spec = declared.get(source) or {}
        name = spec.get("name") or (source if spec.get("external") else f"{project}_{source}")
        yield interpolate(name, env), read_only


# --- workflows: the docker compose calls in a run script ------------------------------------------------

GLOBAL_WITH_VALUE = {"-f", "--file", "-p", "--project-name", "--profile", "--project-directory",
                     "--env-file", "--ansi", "--progress", "--parallel"}
SUB_WITH_VALUE = {"-e", "--env", "-v", "--volume", "-w", "--workdir", "--name", "--entrypoint", "-u", "--user",
                  "-p", "--publish", "-l", "--label", "--pull", "--cap-add", "--cap-drop", "--scale", "-t",
                  "--timeout", "--exit-code-from", "--attach", "--no-attach", "--wait-timeout", "--env-from-file"}


def script_lines(script):
    """The lines of a `run:` script, continuation lines joined, comments left out."""
    return [line for line in script.replace("\\\n", " ").splitlines() if not line.lstrip().startswith("#")]


def compose_calls(script, all_services):
    """Every `docker compose` / `docker-compose` call of a script: dicts with the subcommand, the services
    it acts on, the options that choose what Compose loads (files, env_file, project_dir), the subcommand's
    options and its extra -v mounts."""
    calls = []
    for line in script_lines(script):
        for m in re.finditer(r"\bdocker(?:\s+compose\b|-compose\b)(?!\.)(.*)", line):
            rest = re.split(r"\s(?:&&|\|\||;|\|)\s", m.group(1))[0]
            try:
                words = shlex.split(rest, comments=True)
            except ValueError:  # a quote that closes on a later line
                words = rest.split()
            call = {"cmd": None, "services": [], "mounts": [], "files": [], "env_file": None,
                    "project_dir": None, "options": []}
            i = 0
            while i < len(words) and words[i].startswith("-"):  # global options
                option = words[i].split("=", 1)[0]
                value = words[i].split("=", 1)[1] if "=" in words[i] else None
                if option in GLOBAL_WITH_VALUE and value is None:
                    i += 1
                    value = words[i] if i < len(words) else ""
                if option in ("-f", "--file"):
                    call["files"].append(value)
                elif option == "--project-directory":
                    call["project_dir"] = value
                elif option == "--env-file":
                    call["env_file"] = value
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
                    call["options"].append(option)
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


# Compose's default files, in the order it looks for them in the project folder, and their overrides
# (compose-spec "Compose file", docker docs "Merge Compose files"): the first found is loaded with its
# override beside it.
DEFAULT_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")


def override_of(name):
    stem, ext = name.rsplit(".", 1)
    return f"{stem}.override.{ext}"


def dotenv(text) -> dict:
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.removeprefix("export ").strip()] = value.strip().strip("'\"")
    return out


def compose_sources(call, shell_env, workspace):
    """What a compose call makes Compose read, as Compose v2 decides it: ([(where, path)] of the compose
    files, (where, path) of the .env file or None, the variables the files are interpolated with).
    `where` is "workspace" (the project folder: what the checkout holds, and what containers write) or
    the path as given (outside the workspace). ``workspace`` maps file names of the project folder to their
    text (what a pull request could put there)."""
    def place(path):
        if path.startswith(("$", "/")) or call["project_dir"] not in (None, ".", "$GITHUB_WORKSPACE"):
            return path, path
        return "workspace", posixpath.normpath(path)

    env_file = None
    if call["env_file"] is None:
        env_file = ("workspace", ".env")  # the project folder's .env, unless --env-file names another
    elif call["env_file"] != "/dev/null":
        env_file = place(call["env_file"])
    dot = dotenv(workspace.get(".env")) if env_file == ("workspace", ".env") else {}
    variables = {**dot, **shell_env}  # the shell's environment wins over .env
    if call["files"]:
        files = [place(f) for f in call["files"]]
    elif variables.get("COMPOSE_FILE"):
        files = [place(f) for f in variables["COMPOSE_FILE"].split(variables.get("COMPOSE_PATH_SEPARATOR", ":"))]
    else:
        first = next((n for n in DEFAULT_FILES if n in workspace), "docker-compose.yml")
        files = [("workspace", first)] + ([("workspace", override_of(first))]
                                          if override_of(first) in workspace else [])
    return files, env_file, variables


def merge(base, extra):
    """Compose's merge of a later file into an earlier one: mappings merged key by key, sequences
    (volumes, devices, security_opt, ...) appended, anything else replaced."""
    if isinstance(base, dict) and isinstance(extra, dict):
        out = dict(base)
        for key, value in extra.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(extra, list):
        return base + [v for v in extra if v not in base]
    return extra
