"""Accepting an intended change (perf-accept.yml): only the base's entry accepts, within its allowance,
for the commit it names; the verdict and gate.md show it; main's history restarts drift from there."""

import json
import subprocess
from pathlib import Path

import pytest

from mlagate import config, gate, gitops
from mlagate.cli import demo
from mlagate.decide import acceptance, verdict
from mlagate.decide.vocabulary import Outcome, Status
from mlagate.store.env import RunEnv
from mlagate.store.errors import GateError
from mlagate.store.results import Store

SEESAW_DENSE = "tilelang-seesaw h=16 b=* s=4096 float16"  # the demo head's two regressions: +7.2%, +11.2%


def entry(max_change=0.12, commit=demo.HEAD[:10], cases=(SEESAW_DENSE,), pr=7):
    return (f"accepted:\n  - commit: {commit}\n    pr: {pr}\n    cases: {json.dumps(list(cases))}\n"
            f"    max_change: {max_change}\n    why: four KV splits, for ragged batches\n    who: a-maintainer\n")


def gate_demo(tmp_path, texts):
    out = tmp_path / "gate"
    run = gate.run_gate(config.load(), base_rev=demo.BASE, head_rev=demo.HEAD, results=demo.HISTORY, out_dir=out,
                        machine=demo.MACHINE, accept_texts=texts)
    return run.verdict, json.loads((out / "verdict.json").read_text()), (out / "gate.md").read_text()


def seesaw(verdict_json):
    return [c for c in verdict_json["cases"] if c["case"][0] == "tilelang-seesaw" and c["case"][-1] == "dense"]


def test_the_acceptance_flow_end_to_end_on_the_recorded_pair(tmp_path):
    # 1. the regression fails
    v, js, md = gate_demo(tmp_path / "1", None)
    assert (v.outcome, v.exit_code) == (Outcome.REGRESSION, 1)
    assert {c["status"] for c in seesaw(js)} == {"regression"}

    # 2. the same, with a maintainer's entry on the base side: passes, and says so
    v, js, md = gate_demo(tmp_path / "2", (entry(), entry()))
    assert (v.outcome, v.exit_code) == (Outcome.PASS, 0)
    for case in seesaw(js):
        assert case["status"] == "accepted"
        assert case["acceptance"] == {"commit": demo.HEAD[:10], "pr": 7, "cases": [SEESAW_DENSE], "max_change": 0.12,
                                      "why": "four KV splits, for ragged batches", "who": "a-maintainer",
                                      "source": "base"}
    assert "### Accepted changes" in md and "accepted: +11.2% within +12.0% by perf-accept.yml entry of PR #7" in md
    assert md.count("☑️ accepted") == 2

    # 3. the entry written by the pull request alone accepts nothing
    v, js, md = gate_demo(tmp_path / "3", (None, entry()))
    assert (v.outcome, v.exit_code) == (Outcome.REGRESSION, 1)
    for case in seesaw(js):
        assert case["status"] == "regression" and case["acceptance"]["source"] == "head"
        assert any("cannot accept its own slowdown" in r for r in case["reasons"])

    # 4. an allowance narrower than the measured change (3% for +7.2% and +11.2%) fails
    v, js, md = gate_demo(tmp_path / "4", (entry(0.03), entry(0.03)))
    assert (v.outcome, v.exit_code) == (Outcome.REGRESSION, 1)
    assert {c["status"] for c in seesaw(js)} == {"regression"}
    assert "accepts at most +3.0%; measured +11.2%" in md


def test_an_entry_applies_only_to_its_commit_and_cases(tmp_path):
    v, *_ = gate_demo(tmp_path / "a", (entry(commit="0123456789"),) * 2)
    assert v.outcome == Outcome.REGRESSION  # another commit's acceptance
    v, *_ = gate_demo(tmp_path / "b", (entry(cases=["tilelang-seesaw h=16 b=64 s=4096 float16"]),) * 2)
    assert v.outcome == Outcome.REGRESSION
    assert {c.label: c.status for c in v.cases if c.case[0] == "tilelang-seesaw" and c.case[-1] == "dense"} == {
        "tilelang-seesaw h=16 b=64 s=4096 float16": Status.ACCEPTED,
        "tilelang-seesaw h=16 b=128 s=4096 float16": Status.REGRESSION}


@pytest.mark.parametrize("text, names", [
    ("accepted: {}", "one key, `accepted:`"),
    ("accepted:\n  - {commit: abcdef1, pr: 1, cases: [x], max_change: 1.5, why: w, who: m}", "accepted[0].max_change"),
    ("accepted:\n  - {commit: main, pr: 1, cases: [x], max_change: 0.1, why: w, who: m}", "accepted[0].commit"),
    ("accepted:\n  - {commit: abcdef1, pr: 1, cases: [x], max_change: 0.1, who: m}", "missing why"),
    ("accepted:\n  - {commit: abcdef1, pr: 1, cases: [], max_change: 0.1, why: w, who: m, by: x}", "unknown key by"),
])
def test_a_malformed_file_is_an_error_naming_the_entry(text, names):
    with pytest.raises(GateError, match="perf-accept.yml of base") as e:
        gate.acceptances(demo.BASE, demo.HEAD, (text, None))
    assert names in str(e.value)


def commit_all(repo: Path, message: str) -> str:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True)
    return gitops.git("rev-parse", "HEAD", repo=repo)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    path = tmp_path / "repo"
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    monkeypatch.setattr(gitops, "REPO", path)
    return path


def test_the_files_are_read_from_the_commits_and_only_the_base_accepts(repo):
    (repo / "README").write_text("x")
    base = commit_all(repo, "base")
    (repo / acceptance.FILE).write_text(entry(commit="abcdef1"))
    head = commit_all(repo, "head adds its own entry")
    (repo / acceptance.FILE).write_text(entry(commit="abcdef1", pr=99))  # not committed: never read
    trusted, proposed, commits = gate.acceptances(base, head)
    assert trusted == [] and [e.pr for e in proposed] == [7] and commits == {head}
    trusted, proposed, _ = gate.acceptances(head, head)
    assert [e.pr for e in trusted] == [7] and proposed == []


def test_a_merge_gated_by_perf_pr_applies_the_entry_of_the_pull_requests_head(repo):
    (repo / "README").write_text("x")
    base = commit_all(repo, "base")
    subprocess.run(["git", "-C", str(repo), "checkout", "-qb", "pr"], check=True)
    (repo / "kernel").write_text("slower")
    pr_head = commit_all(repo, "the change")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--no-ff",
                    "-m", "merge", "pr"], check=True)
    merge = gitops.git("rev-parse", "HEAD", repo=repo)
    assert gate.acceptances(base, merge)[2] == {merge, pr_head}


def test_an_accepted_change_on_main_restarts_drift_and_bisect_from_it(repo):
    """main: old, old, the accepted change (slower), after it; drift compares head with what came after."""
    store = Store(demo.HISTORY)
    fast, slow = store.load(demo.MACHINE, demo.BASE), store.load(demo.MACHINE, demo.HEAD)
    commits = []
    for name in ("one", "two", "change", "after"):
        (repo / "f").write_text(name)
        commits.append(commit_all(repo, name))
    history = [type(fast)(**{**fast.__dict__, "commit": c}) if i < 2 else type(slow)(**{**slow.__dict__, "commit": c})
               for i, c in enumerate(commits)]
    accepted = acceptance.parse(entry(commit=commits[2]), "test")
    marks = acceptance.change_marks(history, accepted)
    assert [(e.pr, c) for e, c in marks] == [(7, commits[2])]
    cfg = config.load()
    label = "tilelang-seesaw h=16 b=128 s=4096 float16"
    assert [r.commit for r in acceptance.since_mark(history, label, marks)] == commits[2:]
    assert acceptance.since_mark(history, "tilelang-hopper h=16 b=128 s=4096 float16", marks) == history

    def drifting(marks_):
        v = verdict.evaluate(slow, slow, cfg, "cuda", history=history, marks=marks_)
        return sorted(c.label for c in v.cases if c.drift)

    assert label in drifting(())  # against the old, faster distribution
    assert label not in drifting(marks)


def test_bisect_looks_for_drift_only_after_the_accepted_change(repo):
    from mlagate.bisect import run as bisect_run

    store = Store(demo.HISTORY)
    fast, slow = store.load(demo.MACHINE, demo.BASE), store.load(demo.MACHINE, demo.HEAD)
    commits = []
    for name in ("old", "change"):
        (repo / "f").write_text(name)
        commits.append(commit_all(repo, name))
    history = [type(fast)(**{**fast.__dict__, "commit": commits[0]}),
               type(slow)(**{**slow.__dict__, "commit": commits[1]})]
    marks = acceptance.change_marks(history, acceptance.parse(entry(commit=commits[1]), "test"))
    assert bisect_run.drift(history, slow, 0.05)[0] == commits[0]
    assert bisect_run.drift(history, slow, 0.05, marks) == (None, [])


def test_the_history_marks_an_accepted_change_where_it_starts(repo, tmp_path):
    """The newest recorded commit's perf-accept.yml names the change: its commit and the cases it covers are
    marked in the trend table and on the case page."""
    from mlagate.report import history

    store = Store(demo.HISTORY)
    fast, slow = store.load(demo.MACHINE, demo.BASE), store.load(demo.MACHINE, demo.HEAD)
    (repo / "f").write_text("old")
    old = commit_all(repo, "old")
    (repo / "f").write_text("change")
    change = commit_all(repo, "the change")
    (repo / acceptance.FILE).write_text(entry(commit=change))
    after = commit_all(repo, "accept it")
    recent = [type(fast)(**{**fast.__dict__, "commit": old}), type(slow)(**{**slow.__dict__, "commit": change}),
              type(slow)(**{**slow.__dict__, "commit": after})]
    cfg = config.load()
    marks = history.gate_marks(cfg, recent, {c: RunEnv(platform="cuda") for c in (old, change, after)})
    html = history.trend_section(cfg, tmp_path, recent, demo.MACHINE, marks, sorted)
    header = html.split("<thead>")[1].split("</thead>")[0]
    assert f'<code>{change[:8]}</code> <span class="bad">✗ gate</span> <span class="acc">☑ accepted</span>' in header
    assert header.count("☑ accepted") == 1 and "drift" not in header  # drift compares with what followed it
    row = next(r for r in html.split("<tr>") if "tilelang-seesaw" in r and "<td>128</td>" in r and ">dense<" in r)
    assert '<td class="failed">175.0 <small class="up">+11.2%</small> ✗ ☑</td>' in row
    page = (tmp_path / "cases" / "tilelang-seesaw-128-4096-float16-16-dense.html").read_text()
    assert "☑ accepted change" in page
