"""The store's files as written and refused: a sidecar's text, the refusal of a commit already recorded, and
what a results-branch push counts as a change (git status -z, renames, mlagate's control files)."""

import pytest

import gate_fixtures as fx
from mlagate.store import files
from mlagate.store.branch import commit_branch
from mlagate.store.errors import StoreError
from mlagate.store.results import Store, refuse_recorded
from test_store import _branch, git


def test_a_sidecar_is_json_indented_by_one_space_one_value_a_line(tmp_path):
    """The form every recorded sidecar has on the results branch: a diff of two records' sidecars reads by line."""
    path = Store(tmp_path).write_sidecar("m", "a" * 40, "env", {"gpu": "NVIDIA H200", "clocks": [1980, 1755]})
    assert path == tmp_path / "m" / "aaaaaaaa-env.sidecar"
    assert path.read_text() == '{\n "gpu": "NVIDIA H200",\n "clocks": [\n  1980,\n  1755\n ]\n}'


def test_a_commit_already_recorded_is_refused_with_the_whole_message(tmp_path):
    refuse_recorded(fx.RESULTS, fx.MACHINE, "c" * 40)  # not recorded: no error
    refuse_recorded(tmp_path / "empty", fx.MACHINE, fx.BASE)  # nor in a store that does not exist yet
    with pytest.raises(StoreError) as raised:
        refuse_recorded(fx.RESULTS, fx.MACHINE, fx.BASE)
    assert str(raised.value) == (f"{fx.RESULTS / fx.MACHINE}: b292e892 is already recorded on 'h200'; the store is "
                                 "append-only (record a new commit)")


# -- what a push counts as a change -------------------------------------------------------------------

def test_a_store_that_only_took_its_lock_has_nothing_to_push(tmp_path):
    """A record that took the lock of a new store and stopped: its folder holds only mlagate's control file,
    so the push finds nothing new (git's untracked folder is looked into, not counted as a change)."""
    branch = _branch(tmp_path)
    with files.store_lock(branch / "results" / "new-store"):
        pass
    assert [p.name for p in (branch / "results" / "new-store").iterdir()] == [files.LOCK]
    assert commit_branch(branch, "nothing", push=False) is False


def test_a_renamed_results_file_is_refused_naming_it_once(tmp_path):
    """git status -z gives a rename's new path, then its old one: the old one is no change of its own, and
    the entries after it are read as they are (an added file next to it is no refusal)."""
    branch = _branch(tmp_path)
    folder = branch / "results" / "m"
    folder.mkdir(parents=True)
    (folder / "aaaaaaaa-existing.json").write_text("{}")
    assert commit_branch(branch, "one", push=False) is True
    git(branch, "mv", "results/m/aaaaaaaa-existing.json", "results/m/bbbbbbbb-existing.json")
    (folder / "cccccccc-existing.json").write_text("{}")
    with pytest.raises(StoreError) as raised:
        commit_branch(branch, "renamed", push=False)
    assert str(raised.value) == (f"{folder / 'bbbbbbbb-existing.json'}: modified, not only added (1 file(s) modified "
                                 "or deleted: results/m/bbbbbbbb-existing.json); results files and sidecars are "
                                 "append-only")


@pytest.mark.parametrize("text, why", [('{"written": 1}', "KeyError: 'files'"),
                                       ('{"files": [1]}', "TypeError: files: a list of entries, got [1]")])
def test_a_journal_of_the_wrong_shape_is_refused_naming_what_is_wrong_and_what_to_do(tmp_path, text, why):
    (tmp_path / files.JOURNAL).write_text(text)
    with pytest.raises(StoreError) as refused:
        files.read_journal(tmp_path)
    journal = tmp_path / files.JOURNAL
    assert str(refused.value) == f"{journal}: unreadable install journal ({why}); move it away to go on"
