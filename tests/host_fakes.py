"""A runner host on this CPU machine, for tests/test_host_steps.py: workflow steps run as an unprivileged
"runner user" (nobody, when the tests run as root) beside a fake Docker daemon that runs as root, as the
real one does; an HTTPS git server (git http-backend) for the results push; a listener that records the
credentials sent to it. Everything listens on 127.0.0.1 or a unix socket under the test's folder and
stops with the test."""

import base64
import json
import os
import re
import shutil
import socketserver
import ssl
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUNNER_UID = 65534  # nobody
SYSTEM_PYTHON = "/usr/bin/python3"  # one the runner user can run (the venv's lives under /root)
CAN_DROP = os.getuid() == 0 and Path(SYSTEM_PYTHON).exists()
CLIENT = """#!/usr/bin/python3
# The docker CLI, faked: hands its arguments to the fake daemon (tests/host_fakes.py) and prints its answer.
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["FAKE_DOCKER_SOCKET"])
s.sendall(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()}).encode() + b"\\n")
answer = json.loads(s.makefile().readline())
sys.stdout.write(answer["stdout"]); sys.stderr.write(answer["stderr"])
sys.exit(answer["rc"])
"""
# What the fake daemon runs inside a "container": commands the workflows' cleanups use, nothing else.
CONTAINER_COMMANDS = {"find", "chown", "true"}


@contextmanager
def runner_host():
    """A folder the runner user can use (pytest's tmp_path is root's own): workspace, RUNNER_TEMP, HOME,
    a bin folder; removed as root at the end."""
    base = Path(tempfile.mkdtemp(prefix="runner-host-", dir="/tmp" if CAN_DROP else None))  # /tmp: nobody reaches it
    base.chmod(0o755)
    try:
        for name in ("workspace", "temp", "home", "bin"):
            (base / name).mkdir()
            if CAN_DROP:
                os.chown(base / name, RUNNER_UID, RUNNER_UID)
        yield base
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def as_runner():
    """subprocess keywords that run a command as the runner user (nothing when the tests are not root)."""
    return {"user": RUNNER_UID, "group": RUNNER_UID, "extra_groups": []} if CAN_DROP else {}


class FakeDocker:
    """The Docker daemon as far as the workflows' cleanup uses it: `docker run IMAGE CMD` and `docker
    compose ... run SERVICE CMD` run CMD as this process's user (root) with the workspace bind-mounted at
    /workspace (the path is mapped, the command is real); `image inspect` finds no image; the rest
    answers nothing. Every call is kept in .calls."""

    def __init__(self, base: Path):
        self.base, self.calls = base, []
        self.socket = base / "docker.sock"
        (base / "bin" / "docker").write_text(CLIENT)
        (base / "bin" / "docker").chmod(0o755)
        daemon = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                request = json.loads(self.rfile.readline())
                rc, out, err = daemon.answer(request["argv"], request["cwd"])
                self.wfile.write(json.dumps({"rc": rc, "stdout": out, "stderr": err}).encode() + b"\n")

        self.server = socketserver.ThreadingUnixStreamServer(str(self.socket), Handler)
        self.socket.chmod(0o777)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def answer(self, argv, cwd):
        self.calls.append(argv)
        if argv[:2] == ["image", "inspect"]:
            return 1, "", "Error: No such image\n"
        if argv[:1] == ["run"]:
            options, rest = self.options(argv[1:], {"--network", "--pull", "--user", "--cap-drop", "--cap-add",
                                                    "--volume", "-v", "--security-opt", "--entrypoint"})
            mounts = {v.split(":")[1]: v.split(":")[0] for k, v in options if k in ("--volume", "-v")}
            return self.container(rest[1:], mounts)
        if argv[:1] == ["compose"]:
            options, rest = self.options(argv[1:], {"-f", "--file", "--env-file", "--project-directory", "-p"})
            folder = dict(options).get("--project-directory", cwd)
            if rest[:1] == ["run"]:
                _, rest = self.options(rest[1:], {"-e", "-v", "--volume", "-w", "-u", "--user", "--entrypoint"})
                return self.container(rest[1:], {"/workspace": folder})
        return 0, "", ""

    @staticmethod
    def options(words, with_value):
        options, i = [], 0
        while i < len(words) and words[i].startswith("-"):
            key, _, value = words[i].partition("=")
            if key in with_value and not value:
                i += 1
                value = words[i]
            options.append((key, value))
            i += 1
        return options, words[i:]

    def container(self, command, mounts):
        """Run a container's command as root, its /workspace paths mapped to the bind-mounted folder."""
        if not command or command[0] not in CONTAINER_COMMANDS:
            return 125, "", f"fake docker: no {command[:1]} in this image\n"
        source = Path(mounts.get("/workspace", "/nonexistent")).resolve()
        if not source.is_relative_to(self.base):
            return 125, "", f"fake docker: {source} is not this test's workspace\n"
        mapped = [re.sub(r"^/workspace(?=/|$)", str(source), word) for word in command]
        out = subprocess.run(mapped, capture_output=True, text=True)
        return out.returncode, out.stdout, out.stderr


def step_env(base: Path, fake_docker: FakeDocker | None = None, **extra):
    """The environment the runner gives a step, on this fake host."""
    env = {"PATH": f"{base / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(base / "home"),
           "GITHUB_WORKSPACE": str(base / "workspace"), "RUNNER_TEMP": str(base / "temp"),
           "GITHUB_STEP_SUMMARY": str(base / "temp" / "summary.md"), "LANG": "C.UTF-8"}
    if fake_docker:
        env["FAKE_DOCKER_SOCKET"] = str(fake_docker.socket)
    return {**env, **extra}


def run_step(script, env, cwd, runner_user=True, strict=True):
    """A `run:` step as the runner runs it: bash --noprofile --norc -eo pipefail, as the runner user
    (strict=False: each command whatever the one before returned, as an action's own git calls)."""
    shell = ["bash", "--noprofile", "--norc", *(["-eo", "pipefail"] if strict else []), "-c", script]
    return subprocess.run(shell, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          **(as_runner() if runner_user else {}))


GITHUB_VALUES = {"github.run_id": "7", "github.run_attempt": "1", "github.event.pull_request.number": "12",
                 "github.event.pull_request.base.sha": "b" * 40, "github.sha": "c" * 40,
                 "vars.MLAGATE_MACHINE || 'mi300x'": "mi300x", "github.token": "t0ken", "runner.temp": None}


def expand(value, base: Path):
    """`${{ ... }}` in an env value or a `with:` input, for the few expressions the workflows use there."""
    def sub(m):
        expression = m.group(1).strip()
        if expression == "runner.temp":
            return str(base / "temp")
        return GITHUB_VALUES.get(expression, "x")
    return re.sub(r"\$\{\{(.*?)\}\}", sub, str(value))


# --- git over HTTPS ---------------------------------------------------------------------------------------


def self_signed_cert(folder: Path) -> tuple:
    """(cert, key) for 127.0.0.1, made with openssl; None when openssl is missing."""
    if not shutil.which("openssl"):
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Listener(ThreadingHTTPServer):
    """Records the Authorization header of every request; answers 401 asking for Basic credentials, unless
    ``git_root`` is set and the credentials are ``accept``'s: then it is git http-backend over that root."""

    def __init__(self, tls=None, git_root=None, accept=None):
        super().__init__(("127.0.0.1", 0), GitHandler)
        self.seen, self.git_root, self.accept = [], git_root, accept
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"

    def close(self):
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address):
        pass  # a client that gives up on TLS (wrong CA) is no test failure


class GitHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while (size := int(self.rfile.readline().strip() or b"0", 16)):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def serve(self):
        auth = self.headers.get("Authorization")
        self.server.seen.append(auth)
        body = self.body()
        if self.server.git_root is None or auth != self.server.accept:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(self.server.git_root), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""), "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": "127.0.0.1", "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
               "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(self.server.git_root)}
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60).stdout
        head, _, payload = out.partition(b"\r\n\r\n") if b"\r\n\r\n" in out else out.partition(b"\n\n")
        headers = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
        status = next((v.strip() for k, v in headers if k.lower() == "status"), "200 OK")
        self.send_response(int(status.split()[0]))
        for k, v in headers:
            if k.lower() != "status":
                self.send_header(k, v.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def git(*args, cwd=None):
    """git as this process's user, in a folder that may be the runner user's (hence safe.directory)."""
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()
