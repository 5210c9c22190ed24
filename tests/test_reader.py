"""The streaming dump reader: path resolution, header checks, damaged manifests, safe loading."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle

import pytest
import torch

from aoti_debug.errors import DumpError, FormatVersionError, RecordError
from aoti_debug.format.reader import RunReader, find_runs, resolve_run
from aoti_debug.format.schema import tensor_filename
from aoti_debug.format.writer import RunWriter, new_run_info
from aoti_debug.runtime.stats import tensor_stats

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it


def write_run(path, tensors: dict[str, torch.Tensor], kernel: str = "cpp_fused_add_0") -> str:
    """A run written by the real RunWriter: one launch, one after-record per tensor."""
    w = RunWriter(str(path), new_run_info(os.path.basename(str(path)), "save", 0, 1, device="cpu"))
    for seq, (arg, t) in enumerate(tensors.items(), 1):
        stats, checksum = tensor_stats(t)
        name = tensor_filename(seq, "after", kernel, arg)
        torch.save(t, w.tensor_path(name))
        w.append({"seq": seq, "launch": 1, "graph": "graph0", "wrapper": "python", "kernel": kernel, "op": kernel,
                  "kernel_call": 0, "phase": "after", "arg": arg, "role": "output", "index": seq - 1,
                  "kind": "tensor", "dtype": str(t.dtype)[6:], "shape": list(t.shape), "stride": list(t.stride()),
                  "device": "cpu", "numel": t.numel(), "stats": stats.to_dict(), "checksum": checksum,
                  "file": f"tensors/{name}"})
    w.close()
    return str(path)


def rewrite_manifest(run: str, edit) -> None:
    path = os.path.join(run, "manifest.jsonl")
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    recs = edit(recs) or recs
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in recs)


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "root" / "run1", {"buf0": torch.arange(6.0).view(2, 3), "buf1": torch.ones(4)})


# -- resolving a path -------------------------------------------------------------------
def test_run_dir_and_root_with_one_run_resolve_to_the_run(run):
    root = os.path.dirname(run)
    assert resolve_run(run) == run
    assert resolve_run(root) == run
    assert resolve_run(os.path.join(run, "manifest.jsonl")) == run


def test_root_with_two_runs_names_both(tmp_path, run):
    write_run(tmp_path / "root" / "run2", {"buf0": torch.zeros(1)})
    with pytest.raises(DumpError, match=r"holds 2 runs \(run1, run2\); name one"):
        resolve_run(str(tmp_path / "root"))


def test_rank_subdirectories_are_runs(tmp_path):
    write_run(tmp_path / "r" / "job" / "rank0", {"buf0": torch.zeros(1)})
    assert resolve_run(str(tmp_path / "r")) == str(tmp_path / "r" / "job" / "rank0")
    write_run(tmp_path / "r" / "job" / "rank1", {"buf0": torch.zeros(1)})
    assert [os.path.basename(p) for p in find_runs(str(tmp_path / "r"))] == ["rank0", "rank1"]
    with pytest.raises(DumpError, match=r"job/rank0, job/rank1"):
        resolve_run(str(tmp_path / "r"))


def test_missing_path_and_non_dump_directory(tmp_path):
    with pytest.raises(DumpError, match="no such file or directory"):
        RunReader(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpError, match="not an aoti_debug dump"):
        RunReader(str(tmp_path / "empty"))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DumpError, match="is a file"):
        RunReader(str(tmp_path / "f.txt"))


# -- the header ----------------------------------------------------------------------------
def test_newer_format_version_is_refused(run):
    info_path = os.path.join(run, "run.json")
    info = json.load(open(info_path))
    info["format_version"] = 99
    json.dump(info, open(info_path, "w"))
    with pytest.raises(FormatVersionError, match="format version 99.*up to 1"):
        RunReader(run)


def test_unreadable_header_is_a_dump_error(run):
    open(os.path.join(run, "run.json"), "w").write("{not json")
    with pytest.raises(DumpError, match="unreadable run header"):
        RunReader(run)


# -- the manifest --------------------------------------------------------------------------
def test_records_stream_in_order_and_reread_by_offset(run):
    reader = RunReader(run)
    entries = list(reader.entries())
    assert [r.arg for _, _, r in entries] == ["buf0", "buf1"]
    assert reader.record_at(entries[1][0]).arg == "buf1"
    assert not reader.notes and not reader.problems
    reader.close()


def test_truncated_last_line_of_a_killed_run_is_dropped_with_a_note(run):
    path = os.path.join(run, "manifest.jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-25])  # cut inside the last line, no newline
    reader = RunReader(run)
    assert [r.arg for r in reader.records()] == ["buf0"]
    assert reader.truncated
    assert any("truncated" in n for n in reader.notes)
    assert not reader.problems


def test_damaged_middle_line_is_a_problem_and_skipped(run):
    path = os.path.join(run, "manifest.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    open(path, "w").write("garbage{\n" + "".join(lines) + json.dumps({"seq": 9}) + "\n")
    reader = RunReader(run)
    assert [r.arg for r in reader.records()] == ["buf0", "buf1"]
    assert reader.problems == ["manifest.jsonl line 1: not valid JSON (skipped)",
                               "manifest.jsonl line 4: record lacks launch, graph, kernel, phase, arg (skipped)"]


# -- tensor files --------------------------------------------------------------------------
def test_load_tensor_is_memory_mapped_and_exact(run):
    reader = RunReader(run)
    rec = next(reader.records())
    t = reader.load_tensor(rec)
    assert torch.equal(t, torch.arange(6.0).view(2, 3))
    plain = reader.load_tensor(rec, mmap=False)
    assert torch.equal(t, plain)


@pytest.mark.parametrize("file", ["../../../etc/passwd", "/etc/passwd", "tensors/../../sibling/x.pt"])
def test_manifest_paths_cannot_leave_the_dump(run, file):
    def edit(recs):
        recs[0]["file"] = file

    rewrite_manifest(run, edit)
    reader = RunReader(run)
    assert [r.arg for r in reader.records()] == ["buf1"]  # judged when read: the record is damage
    assert reader.problems == [f'manifest.jsonl line 1: file {json.dumps(file)} points outside the dump (skipped)']
    # And when opened: a record made in code gets no further.
    rec = dataclasses.replace(next(RunReader(run).records()), file=file)
    with pytest.raises(RecordError, match="points outside the dump"):
        reader.load_tensor(rec)


def test_symlink_out_of_the_dump_is_refused(run, tmp_path):
    outside = tmp_path / "outside.pt"
    torch.save(torch.zeros(2, 3), outside)
    reader = RunReader(run)
    rec = next(reader.records())
    target = os.path.join(run, rec.file)
    os.unlink(target)
    os.symlink(outside, target)
    with pytest.raises(RecordError, match="points outside the dump"):
        reader.load_tensor(rec)


def test_missing_and_corrupt_files(run):
    reader = RunReader(run)
    r0, r1 = list(reader.records())
    os.unlink(os.path.join(run, r0.file))
    with pytest.raises(RecordError, match=r"seq 1 cpp_fused_add_0 call 0 after buf0: tensor file .* is missing"):
        reader.load_tensor(r0)
    with open(os.path.join(run, r1.file), "r+b") as f:
        f.truncate(40)
    with pytest.raises(RecordError, match=r"seq 2 .* buf1: tensor file .* is corrupt \("):
        reader.load_tensor(r1)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch BOOM_MARKER",))


def test_loading_never_runs_code_from_a_dump(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reader = RunReader(run)
    rec = next(reader.records())
    torch.save({"x": _Boom()}, os.path.join(run, rec.file), pickle_module=pickle)
    with pytest.raises(RecordError, match="is corrupt"):
        reader.load_tensor(rec)
    assert not (tmp_path / "BOOM_MARKER").exists()


def test_file_that_disagrees_with_its_record(run):
    reader = RunReader(run)
    rec = next(reader.records())
    torch.save(torch.zeros(3, 2), os.path.join(run, rec.file))
    with pytest.raises(RecordError, match=r"holds float32\[3, 2\] but the manifest says float32\[2, 3\]"):
        reader.load_tensor(rec)
    torch.save(torch.zeros(3, 2, dtype=torch.int32), os.path.join(run, rec.file))
    with pytest.raises(RecordError, match=r"holds int32\[3, 2\] but the manifest says float32\[2, 3\]"):
        reader.load_tensor(rec)
    # More values than the record holds: refused from the archive's directory, unloaded.
    torch.save(torch.zeros(3, 2, dtype=torch.float64), os.path.join(run, rec.file))
    with pytest.raises(RecordError, match=r"holds 48 bytes of values; the manifest says float32\[2, 3\] \(24 bytes\)"):
        reader.load_tensor(rec)
    torch.save([1, 2], os.path.join(run, rec.file))
    with pytest.raises(RecordError, match="holds a list, not a tensor"):
        reader.load_tensor(rec)
