"""The run writer (format/writer.py) never writes through a link it did not create.

Below the dump root every directory is made by the runtime (``mkdir``: new) and opened
with ``O_DIRECTORY|O_NOFOLLOW``; every file is created at those descriptors with
``O_EXCL|O_NOFOLLOW`` (or appended to with ``O_NOFOLLOW``). A link or another user's
directory where the run directory or its ``tensors/`` would be is refused, and the run
goes to the next ``-<n>`` sibling. The end-to-end tests through both wrappers are in
``test_hostile_runtime.py``.
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch

from aoti_debug.format import writer
from aoti_debug.format.schema import MANIFEST_FILE, RUN_FILE, TENSOR_DIR
from aoti_debug.format.writer import (LINK_REFUSED, NOT_A_DIRECTORY, OWNER_FILE, RefusedDirectory, RunWriter,
                                      claim_run_directory, new_run_info)

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it


@pytest.fixture
def planted(tmp_path):
    """``(root, target)``: an empty dump root and an empty directory elsewhere that a
    planted link points at."""
    root, target = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    target.mkdir()
    return root, target


def info(run_id: str):
    return new_run_info(run_id, "save", 0, 1, device="cpu")


def test_a_link_at_the_run_directory_is_refused_for_a_sibling(planted):
    root, target = planted
    os.symlink(target, root / "job")
    path, rid, holder = claim_run_directory(str(root), "job", 0, 1, "python")
    assert (path, rid, holder) == (str(root / "job-2"), "job-2", LINK_REFUSED)
    w = RunWriter(path, info(rid))
    w.append({"seq": 1})
    w.close()
    assert os.listdir(target) == [] and os.path.islink(root / "job")
    assert sorted(os.listdir(path)) == sorted([OWNER_FILE, RUN_FILE, MANIFEST_FILE, TENSOR_DIR])


def test_a_link_at_the_shared_directory_of_a_multi_rank_run_is_refused(planted):
    root, target = planted
    os.symlink(target, root / "job")
    path, rid, holder = claim_run_directory(str(root), "job", 1, 2, "python")
    assert (path, rid, holder) == (str(root / "job-2" / "rank1"), "job-2", LINK_REFUSED)
    RunWriter(path, info(rid)).close()
    assert os.listdir(target) == []
    # the other rank of the same job shares the real job-2/
    path0, rid0, _ = claim_run_directory(str(root), "job-2", 0, 2, "python")
    assert (path0, rid0) == (str(root / "job-2" / "rank0"), "job-2")


def test_an_existing_directory_is_never_claimed(planted):
    """The run directory must be new: one there already (links inside it or not) is held."""
    root, target = planted
    (root / "job").mkdir()
    os.symlink(target, root / "job" / TENSOR_DIR)
    os.symlink(target / MANIFEST_FILE, root / "job" / MANIFEST_FILE)
    path, rid, holder = claim_run_directory(str(root), "job", 0, 1, "python")
    assert (path, holder) == (str(root / "job-2"), "an earlier run (no .owner file)")
    (root / "file").write_text("")
    assert claim_run_directory(str(root), "file", 0, 1, "python")[2] == NOT_A_DIRECTORY
    assert os.listdir(target) == []


def test_another_users_directory_is_refused(planted, monkeypatch):
    root, _ = planted
    (root / "job").mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(root).st_uid + 1)
    fd = os.open(str(root), os.O_RDONLY)
    try:
        assert writer.refusal_at(fd, "job") == f"a directory of uid {os.stat(root).st_uid} (not this user's)"
        with pytest.raises(RefusedDirectory, match="not this user's"):
            writer.open_own_dir(fd, "job")
    finally:
        os.close(fd)


def test_a_claimed_directory_swapped_for_a_link_is_not_written(planted):
    """Between the claim and the writer (or a resumed run's writer) the path is opened
    again without following links and must be the directory that was made."""
    root, target = planted
    path, rid, _ = claim_run_directory(str(root), "job", 0, 1, "python")
    os.rename(path, root / "moved")
    os.symlink(target, path)
    with pytest.raises(RefusedDirectory, match="symbolic link"):
        RunWriter(path, info(rid))
    os.unlink(path)
    os.makedirs(os.path.join(path, TENSOR_DIR))  # a real directory of ours, but not the one claimed
    with pytest.raises(RefusedDirectory, match="no longer the directory this process claimed"):
        RunWriter(path, info(rid))
    assert os.listdir(target) == [] and os.listdir(os.path.join(path, TENSOR_DIR)) == []


def test_the_writer_keeps_writing_to_its_directory_after_the_path_changes(planted):
    root, target = planted
    path, rid, _ = claim_run_directory(str(root), "job", 0, 1, "python")
    w = RunWriter(path, info(rid))
    os.rename(path, root / "moved")
    os.symlink(target, path)
    w.append({"seq": 1})
    w.write_info()
    w.append_site("graph0", 0, "k", "{}")
    with w.open_new(f"{TENSOR_DIR}/t.pt") as fh:
        torch.save(torch.ones(2), fh)
    w.remove(f"{TENSOR_DIR}/t.pt")
    with w.open_new(f"{TENSOR_DIR}/u.pt") as fh:
        torch.save(torch.ones(3), fh)
    w.close()
    assert os.listdir(target) == []
    moved = root / "moved"
    assert (moved / MANIFEST_FILE).read_text() == '{"seq":1}\n'
    assert os.listdir(moved / TENSOR_DIR) == ["u.pt"]
    assert torch.equal(torch.load(moved / TENSOR_DIR / "u.pt", weights_only=True), torch.ones(3))


def test_links_inside_a_directory_are_not_followed(planted):
    """A writer on a directory it is handed (a tool's, a benchmark's): a link at
    ``manifest.jsonl`` or at a tensor file's name is an error, a link at ``run.json`` is
    replaced (renamed over), a link at ``tensors/`` or at the directory itself refused."""
    root, target = planted
    run = root / "run"
    run.mkdir()
    os.symlink(target / MANIFEST_FILE, run / MANIFEST_FILE)
    os.symlink(target / RUN_FILE, run / RUN_FILE)
    with pytest.raises(OSError) as e:
        RunWriter(str(run), info("run"))
    assert e.value.errno == errno.ELOOP
    assert not os.path.islink(run / RUN_FILE) and json.loads((run / RUN_FILE).read_text())["run_id"] == "run"
    os.unlink(run / MANIFEST_FILE)
    w = RunWriter(str(run), info("run"))
    os.symlink(target / "t.pt", run / TENSOR_DIR / "t.pt")
    with pytest.raises(FileExistsError):
        w.open_new(f"{TENSOR_DIR}/t.pt")
    os.symlink(target / "sites.jsonl", run / "sites.jsonl")
    with pytest.raises(OSError) as e:
        w.append_site("graph0", 0, "k", "{}")
    assert e.value.errno == errno.ELOOP
    with pytest.raises(ValueError):
        w.open_new("../escape")
    w.close()
    other = root / "other"
    other.mkdir()
    os.symlink(target, other / TENSOR_DIR)
    with pytest.raises(RefusedDirectory, match="symbolic link"):
        RunWriter(str(other), info("other"))
    os.symlink(target, root / "linked")
    with pytest.raises(RefusedDirectory, match="symbolic link"):
        RunWriter(str(root / "linked"), info("linked"))
    assert os.listdir(target) == []


def test_the_dump_root_may_be_a_link(tmp_path):
    """The dump root is the user's: a link there is followed."""
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "dumps")
    path, rid, holder = claim_run_directory(str(tmp_path / "dumps"), "job", 0, 1, "python")
    assert holder is None and path == str(tmp_path / "dumps" / "job")
    RunWriter(path, info(rid)).close()
    assert sorted(os.listdir(real / "job")) == sorted([OWNER_FILE, RUN_FILE, MANIFEST_FILE, TENSOR_DIR])



# -- the copies of generated sources (runtime/sources.py; native/sources.h in test_native_parts)
def test_source_copies_never_go_through_a_link_in_the_run_directory(planted, tmp_path):
    from aoti_debug.runtime.sources import SOURCES_DIR, copy_sources, graph_folder

    root, target = planted
    wrapper = tmp_path / "cabcdef.py"
    wrapper.write_text("print('generated')\n")
    run = root / "run"
    run.mkdir()
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.symlink(target, run / SOURCES_DIR)
        with pytest.raises(RefusedDirectory, match="symbolic link"):
            copy_sources(fd, "graph0", str(wrapper))
        os.unlink(run / SOURCES_DIR)
        (run / SOURCES_DIR).mkdir()
        os.symlink(target, run / graph_folder("graph0"))
        with pytest.raises(RefusedDirectory, match="symbolic link"):
            copy_sources(fd, "graph0", str(wrapper))
        os.unlink(run / graph_folder("graph0"))
        # A link at a copy's own name is replaced, not written through.
        (run / graph_folder("graph0")).mkdir()
        os.symlink(target / "planted.py", run / graph_folder("graph0") / wrapper.name)
        copied = copy_sources(fd, "graph0", str(wrapper))
        kept = run / graph_folder("graph0") / wrapper.name
        assert not kept.is_symlink() and kept.read_text() == "print('generated')\n"
        assert list(copied) == [wrapper.name]
    finally:
        os.close(fd)
    assert os.listdir(target) == []
