"""What a self-hosted runner's host lets its jobs reach, for the administrator (`mlagate runner-check`).

A job runs as the runner's user, and a pull request's job runs the PR's code: whatever that user can do,
the PR can. The check reads the facts (``gather``: the user, sudo, which Docker daemons it can reach and how
they isolate containers, the runner's registration and environment) and judges them for the runner's role
(``judge``): `pr` runners serve perf-pr.yml, `trusted` ones perf-main.yml and tune.yml. ``judge`` is pure,
so the tests feed it fakes; ``gather`` only reads files, runs `sudo -n true` and asks the daemons.
"""

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# The runner groups the workflows name (tests/test_workflow_trust.py checks that they still do).
GROUPS = {"pr": "mlagate-pr", "trusted": "mlagate-trusted"}
LABELS = ("self-hosted", "linux", "gfx942")
ROOTFUL_SOCKET = "/var/run/docker.sock"
RENDER_NODE = re.compile(r"^/dev/dri/renderD\d+$")
OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Daemon:
    address: str
    reachable: bool
    security: list = field(default_factory=list)  # `docker info` SecurityOptions: name=rootless, name=userns, ...
    error: str = ""

    @property
    def isolated(self) -> str | None:
        """'rootless' or 'userns' when root in a container is not root on the host; None otherwise."""
        names = {o.split(",")[0].removeprefix("name=") for o in self.security}
        return "rootless" if "rootless" in names else "userns" if "userns" in names else None


@dataclass
class Host:
    uid: int
    user: str
    groups: list
    sudo: bool  # sudo -n true succeeded: a job can be root
    daemons: list  # Daemon: DOCKER_HOST's and the rootful socket, each that exists
    runner: dict | None  # the runner folder's .runner (None: none there, as for a just-in-time runner)
    runner_env: dict  # the runner folder's .env: what every job's environment gets
    labels: list  # as the administrator registered them (--labels); labels live on GitHub, not here
    render_node_is_device: bool = False


@dataclass
class Finding:
    level: str
    what: str
    detail: str


def judge(host: Host, role: str) -> list:
    """Findings for a host serving ``role`` ('pr' or 'trusted'): FAIL where a job reaches more than the
    role may, WARN where it could and the administrator should know, ok otherwise."""
    pr = role == "pr"
    out = [Finding(FAIL if host.uid == 0 else OK, "runner user",
                   f"{host.user} (uid {host.uid})" + (": a job is root on the host" if host.uid == 0 else ""))]
    out.append(Finding((FAIL if pr else WARN) if host.sudo else OK, "sudo",
                       "passwordless sudo: a job can become root" if host.sudo else "no passwordless sudo"))
    reachable = [d for d in host.daemons if d.reachable]
    if not reachable:
        out.append(Finding(FAIL, "docker", "no Docker daemon reachable: the workflows run every step in containers"
                           + "".join(f"; {d.address}: {d.error}" for d in host.daemons)))
    for d in reachable:
        if d.isolated:
            out.append(Finding(OK, "docker", f"{d.address}: {d.isolated} daemon, root in a container is not root here"))
        else:
            out.append(Finding(FAIL if pr else WARN, "docker",
                               f"{d.address}: a rootful daemon: whoever reaches it is root on the host"
                               + (" (a pull request's job must not)" if pr else " (trusted runners only)")))
        if d.isolated == "userns":
            out.append(Finding(WARN, "docker", f"{d.address}: userns-remap: the remapped root cannot write the "
                               "runner user's checkout; the workflows expect a rootless daemon"))
    group = (host.runner or {}).get("poolName")
    if host.runner is None:
        out.append(Finding(OK if pr else WARN, "registration",
                           "no .runner: a just-in-time runner (config.sh --jitconfig), or not configured here"))
    else:
        out.append(Finding(OK if group == GROUPS[role] else FAIL, "runner group",
                           f"{group!r}" + ("" if group == GROUPS[role] else f", not {GROUPS[role]!r}")))
        ephemeral = host.runner.get("ephemeral") or host.runner.get("isEphemeral")
        if pr:
            out.append(Finding(OK if ephemeral else FAIL, "ephemeral",
                               "one job, then deregistered" if ephemeral else
                               "a persistent runner: the next job finds what this one left "
                               "(register it with --ephemeral)"))
    missing = [label for label in LABELS if label not in host.labels]
    out.append(Finding(WARN if missing else OK, "labels", f"{host.labels or 'not given (--labels)'}"
                       + (f": the workflows also ask for {missing}" if missing else "")))
    if pr:
        node = host.runner_env.get("MLAGATE_PR_RENDER_NODE", "")
        good = bool(RENDER_NODE.match(node)) and host.render_node_is_device
        out.append(Finding(OK if good else FAIL, "GPU lent to pull requests",
                           f"MLAGATE_PR_RENDER_NODE={node!r}" + ("" if good else
                           " in the runner's .env must be one /dev/dri/renderD<N> of this host")))
    return out


def gather(runner_dir: Path, labels: list) -> Host:
    import grp
    import pwd

    uid = os.getuid()
    runner_file = runner_dir / ".runner"
    runner = json.loads(runner_file.read_text(encoding="utf-8-sig")) if runner_file.exists() else None
    env_file = runner_dir / ".env"
    runner_env = dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                      if "=" in line and not line.startswith("#")) if env_file.exists() else {}
    # The daemon the jobs use (DOCKER_HOST of the runner's .env, else of this shell), and the rootful
    # socket, which a job can name itself whatever DOCKER_HOST says.
    jobs_daemon = runner_env.get("DOCKER_HOST") or os.environ.get("DOCKER_HOST") or f"unix://{ROOTFUL_SOCKET}"
    daemons = [daemon(a) for a in dict.fromkeys([jobs_daemon, f"unix://{ROOTFUL_SOCKET}"])
               if not a.startswith("unix://") or Path(a.removeprefix("unix://")).exists()]
    node = runner_env.get("MLAGATE_PR_RENDER_NODE", "")
    return Host(uid=uid, user=pwd.getpwuid(uid).pw_name, groups=[grp.getgrgid(g).gr_name for g in os.getgroups()],
                sudo=sudo_without_password(), daemons=daemons, runner=runner, runner_env=runner_env, labels=labels,
                render_node_is_device=bool(node) and Path(node).is_char_device())


def sudo_without_password() -> bool:
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def daemon(address: str) -> Daemon:
    import docker

    try:
        info = docker.DockerClient(base_url=address, timeout=10).info()
    except Exception as e:  # noqa: BLE001 - any failure to reach it is the finding itself
        return Daemon(address, False, error=f"{type(e).__name__}: {e}"[:200])
    return Daemon(address, True, security=list(info.get("SecurityOptions") or []))
