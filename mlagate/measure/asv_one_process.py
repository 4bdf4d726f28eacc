"""`asv run` with every benchmark of the suite run in one process: asv's own command, results, stats and
files, without its fixed cost per case.

Under ``--launch-method forkserver`` asv forks a process per benchmark and parameter set, and each fork
unpickles the setup_cache's result (here the whole measured grid): ~58 s of a full-grid record on an H200,
which no GPU count shortens. Here asv's run command is unchanged but for its spawner (``asv.runner.
get_spawner``): one process imports the suite, runs the setup_cache once and keeps its result in memory,
then runs each case as asv_runner's own ``_run`` does (setup, timing loop, teardown; stdout and stderr
captured per case), one after the other. asv discovers, stores and logs as always, so the results file,
benchmarks.json and machine.json are the ones `asv run` writes (tests/test_asv_one_process.py compares
them field by field with a forkserver run).

What a fork per case gave and one process does not: each case a fresh process (the suite's benchmarks hold
no state between cases but the replaying clock, which starts over on each case) and a copy of the cache of
its own (the suite only reads it), and asv's per-benchmark timeout (a replay takes microseconds; the
measuring pass ends by its own deadline, timing.record_s).

Two modes, both importing only asv, asv_runner and the standard library (the second runs with the recorded
commit's mlagate on its path, whatever that commit's mlagate holds):
  python asv_one_process.py asv ARGS...          asv's command line, with the one-process spawner
  python asv_one_process.py serve BENCHMARK_DIR  the process that runs the suite (started by the spawner)
"""

import json
import math
import os
import sys
import tempfile
import traceback

if __name__ == "__main__" and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # this file's folder is mlagate/measure: none of its modules is a top-level one

SCRIPT = os.path.abspath(__file__)


# -- the asv side: asv's run command, one spawner -------------------------------------

def _spawner_class():
    from asv import runner, util

    class OneProcess(runner.Spawner):
        """asv's Spawner interface, answered by one `serve` process for the whole run."""

        def __init__(self, env, benchmark_dir):
            import subprocess

            super().__init__(env, benchmark_dir)
            replies, reply_w = os.pipe()
            env_vars = dict(os.environ)
            env_vars.update(env.env_vars)
            self._proc = subprocess.Popen([env._executable, SCRIPT, "serve", self.benchmark_dir, str(reply_w)],
                                          stdin=subprocess.PIPE, env=env_vars, pass_fds=(reply_w,), text=True)
            os.close(reply_w)  # the process's copy only: its exit ends the replies
            self._replies = os.fdopen(replies)

        def _send(self, **command) -> dict:
            try:
                self._proc.stdin.write(json.dumps(command) + "\n")
                self._proc.stdin.flush()
                line = self._replies.readline()
            except BrokenPipeError:
                line = ""
            if not line:
                raise util.UserError(f"asv_one_process: the suite's process exited with code {self._proc.wait()}")
            return json.loads(line)

        def preimport(self):
            try:
                reply = self._send(action="preimport")
            except util.UserError as e:
                return False, f"asv: benchmark runner crashed\n{e}"
            return reply["errcode"] == 0, reply["out"]

        def create_setup_cache(self, benchmark_id, timeout, params_str):
            cache_dir = tempfile.mkdtemp()  # asv runs the cache's users in it and removes it when they are done
            reply = self._send(action="setup_cache", benchmark_id=benchmark_id, params_str=params_str,
                               cwd=cache_dir)
            if reply["errcode"] == 0:
                return cache_dir, None
            util.long_path_rmtree(cache_dir, True)
            return None, (reply["out"] + f"\nasv: setup_cache failed (exit status {reply['errcode']})").strip()

        def run(self, name, params_str, profile_path, result_file_name, timeout, cwd):
            reply = self._send(action="run", benchmark_id=name, params_str=params_str, profile_path=profile_path,
                               result_file=result_file_name, cwd=cwd)
            return reply["out"], reply["errcode"]

        def close(self):
            if self._proc.poll() is None:
                self._proc.stdin.close()  # end of commands: it exits
            self._proc.wait()
            self._replies.close()

    return OneProcess


def asv_main(argv):
    """asv's command line (``asv.main``), with every benchmark process one process."""
    from asv import main, runner

    spawner = _spawner_class()
    runner.get_spawner = lambda env, benchmark_dir, launch_method=None: spawner(env, benchmark_dir)
    sys.argv = ["asv", *argv]
    main.main()


# -- the suite's side ---------------------------------------------------------------

def _use_asv_pythonpath():
    """As asv's benchmark.py does: the benchmarks' sys.path is ASV_PYTHONPATH (the recorded commit's source)."""
    paths = os.environ.pop("ASV_PYTHONPATH", None)
    if paths is not None:
        for path in reversed(paths.split(os.pathsep)):
            if path not in sys.path:
                sys.path.insert(0, path)
    elif "PYTHONPATH" in os.environ:
        for path in os.environ.pop("PYTHONPATH").split(os.pathsep):
            if path in sys.path:
                sys.path.remove(path)


def _run(benchmark_dir, command, caches):
    """asv_runner.run._run, the setup_cache's result taken from memory instead of cache.pickle."""
    from asv_runner._aux import set_cpu_affinity_from_params
    from asv_runner.benchmarks.mark import SkipNotImplemented
    from asv_runner.discovery import get_benchmark_from_name

    extra_params = json.loads(command["params_str"])
    set_cpu_affinity_from_params(extra_params)
    extra_params.pop("cpu_affinity", None)
    profile_path = None if command["profile_path"] == "None" else command["profile_path"]
    benchmark = get_benchmark_from_name(benchmark_dir, command["benchmark_id"], extra_params=extra_params)
    benchmark.set_cache(caches[command["cwd"]] if benchmark.setup_cache_key is not None else None)
    skip = benchmark.do_setup()
    try:
        if skip:
            result = math.nan
        else:
            try:
                result = benchmark.do_run()
                if profile_path is not None:
                    benchmark.do_profile(profile_path)
            except SkipNotImplemented:
                result = math.nan
    finally:
        benchmark.do_teardown()
    with open(command["result_file"], "w") as fp:
        json.dump(result, fp)


def _answer(benchmark_dir, command, caches):
    from asv_runner._aux import set_cpu_affinity_from_params
    from asv_runner.discovery import disc_benchmarks, get_benchmark_from_name

    action = command["action"]
    if action == "preimport":
        for _ in disc_benchmarks(benchmark_dir, ignore_import_errors=True):
            pass
    elif action == "setup_cache":
        set_cpu_affinity_from_params(json.loads(command["params_str"]))
        caches[command["cwd"]] = get_benchmark_from_name(benchmark_dir, command["benchmark_id"]).do_setup_cache()
    elif action == "run":
        _run(benchmark_dir, command, caches)
    else:
        raise RuntimeError(f"unknown command {command!r:.200}")


def serve(benchmark_dir, reply_fd):
    """Answer the spawner's commands, one JSON line each on stdin, with {"out", "errcode"} lines on
    ``reply_fd``: the output of each command (stdout and stderr, as a forked case's), and 1 if it raised."""
    from asv_runner._aux import posix_redirect_output, update_sys_path

    _use_asv_pythonpath()
    update_sys_path(benchmark_dir)
    caches, here = {}, os.getcwd()
    with os.fdopen(reply_fd, "w") as replies:
        for line in sys.stdin:
            command = json.loads(line)
            errcode = 1
            with tempfile.NamedTemporaryFile(prefix="asv-one-process-", suffix=".out") as out:
                with posix_redirect_output(out.name, permanent=False):
                    try:
                        os.chdir(command.get("cwd") or here)
                        _answer(benchmark_dir, command, caches)
                        errcode = 0
                    except BaseException:  # noqa: BLE001 - reported as the case's output, as a fork's would be
                        traceback.print_exc()
                    finally:
                        os.chdir(here)
                with open(out.name, errors="replace") as f:
                    text = f.read()
            replies.write(json.dumps({"out": text, "errcode": errcode}) + "\n")
            replies.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["asv"]:
        asv_main(sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} asv ARGS... | serve BENCHMARK_DIR REPLY_FD")
