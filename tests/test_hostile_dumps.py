"""Hostile dumps: readers never block, never blow up, and refuse in one line.

A FIFO, socket or link where a dump file should be (run through the CLI in a
subprocess with a timeout: a reader that waits on a FIFO fails by timing out), line
ends other than ``\\n``, a manifest line of many megabytes, a tensor file that inflates
far past what its record declares, and run.json sections of the wrong types.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile

import pytest
import torch

from aoti_debug.cli._common import INTERNAL_ERROR
from aoti_debug.errors import DumpError, RecordError
from aoti_debug.format.files import FileTooLarge, NotRegularFile, iter_lines, open_regular
from aoti_debug.format.reader import MAX_LINE, MAX_RUN_BYTES, RunReader
from tests.conftest import REPO
from tests.test_reader_validation import build_real_runs, cli, copy_of, read_lines, write_lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return build_real_runs(tmp_path_factory)


def error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output
    return result.output.strip()


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail instead of hanging where a read would block."""
    def fire(signum, frame):
        raise AssertionError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- open_regular ----------------------------------------------------------------------------
def test_open_regular_refuses_what_is_not_a_regular_file_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = str(tmp_path / "sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(sock_path)
    link = tmp_path / "link"
    (tmp_path / "plain").write_bytes(b"x")
    os.symlink(tmp_path / "plain", link)
    with deadline(10):
        for path, kind in ((fifo, "a FIFO"), (sock_path, "a socket"), (tmp_path, "a directory"),
                           ("/dev/zero", "a character device")):
            with pytest.raises(NotRegularFile, match=f"is {kind}, not a regular file") as e:
                open_regular(str(path), 100)
            assert isinstance(e.value, DumpError) and isinstance(e.value, OSError)
        with pytest.raises(NotRegularFile, match="is a symbolic link"):
            open_regular(str(link), 100, follow=False)
        with open_regular(str(link), 100) as f:
            assert f.read() == b"x"
    sock.close()


def test_open_regular_bounds_every_read(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    with pytest.raises(FileTooLarge, match="is 100 bytes, larger than 99 bytes"):
        open_regular(str(path), 99)
    with open_regular(str(path), 100) as f:
        assert f.read() == b"a" * 100
    f = open_regular(str(path), 100)
    with open(path, "ab") as grow:  # it grows after the open: the read past the bound fails
        grow.write(b"b")
    with pytest.raises(FileTooLarge, match="larger than 100 bytes"):
        f.read()
    f.close()
    with open_regular(str(path), 1000, encoding="utf-8") as text:
        assert text.read().startswith("aaa")


def test_lines_split_at_every_line_end_and_long_lines_are_skipped_unheld():
    data = b"a\nbb\r\nccc\rdddd\r\r\n" + b"x" * 50 + b"\nend"
    got = [(line.start, line.end, line.raw, line.terminated) for line in iter_lines(io.BytesIO(data), 10, chunk=7)]
    assert got == [(0, 2, b"a\n", True), (2, 6, b"bb\r\n", True), (6, 10, b"ccc\r", True),
                   (10, 15, b"dddd\r", True), (15, 17, b"\r\n", True), (17, 68, None, True),
                   (68, 71, b"end", False)]
    # A line of 32 MiB is skipped in pieces, never held whole.
    big = io.BytesIO(b"x" * (32 << 20) + b"\nok\n")
    tracemalloc.start()
    try:
        lines = list(iter_lines(big, 1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(line.start, line.raw) for line in lines] == [(0, None), ((32 << 20) + 1, b"ok\n")]
    assert peak < 8 << 20, peak


# -- FIFOs and other non-files in every position, through the CLI in a subprocess ----------------------
_DRIVER = textwrap.dedent("""
    import json, sys
    from click.testing import CliRunner
    from aoti_debug.cli import main
    out = []
    for args in json.loads(sys.argv[1]):
        r = CliRunner().invoke(main, args)
        out.append([r.exit_code, r.output])
    print(json.dumps(out))
""")


def run_cli_in_subprocess(commands: list[list[str]], timeout: int = 240) -> list[tuple[int, str]]:
    """Each command's (exit code, output), from one fresh process that must end in time."""
    proc = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(commands)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]


def _replace(run: str, rel: str, how: str) -> None:
    path = os.path.join(run, rel)
    os.unlink(path)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link to /dev/zero":
        os.symlink("/dev/zero", path)
    elif how == "directory":
        os.mkdir(path)


def test_a_fifo_or_device_in_every_file_position_is_refused_without_blocking(runs, tmp_path):
    """run.json, manifest.jsonl, sites.jsonl and a tensor file: exit 2 and one line naming
    the file, from show and both sides of diff, and from diff --full for a tensor file
    (the only command here that opens it)."""
    good = runs["save"]
    tensor = next(r["file"] for r in read_lines(good) if r.get("file"))
    commands, expect = [], []
    for rel in ("run.json", "manifest.jsonl", "sites.jsonl", tensor):
        for how in ("fifo", "link to /dev/zero", "directory"):
            run = copy_of(good, tmp_path, f"{len(expect)}")
            _replace(run, rel, how)
            if rel == tensor:
                cases = [["diff", "--no-progress", "--full", run, good], ["diff", "--no-progress", "--full", good, run]]
            else:
                cases = [["show", run], ["diff", "--no-progress", run, good], ["diff", "--no-progress", good, run]]
            for args in cases:
                commands.append(args)
                expect.append((rel, how))
    results = run_cli_in_subprocess(commands)
    for (rel, how), args, (code, output) in zip(expect, commands, results):
        assert code == 2, (rel, how, args, output)
        assert "Traceback" not in output and INTERNAL_ERROR not in output, output
        named = os.path.basename(rel)
        if rel.endswith(".pt"):
            assert named in output and ("not a regular file" in output or "points outside the dump" in output
                                        or "symbolic link" in output), (rel, how, output)
        else:
            lines = output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("Error: ") and named in lines[0], (rel, how, output)
            assert "not a regular file" in lines[0] or "symbolic link" in lines[0], (rel, how, output)


def test_show_of_a_dump_whose_manifest_is_a_fifo_ends_at_once(runs, tmp_path):
    """The installed command itself, not only the click group."""
    run = copy_of(runs["stats"], tmp_path)
    _replace(run, "manifest.jsonl", "fifo")
    proc = subprocess.run([sys.executable, "-m", "aoti_debug.cli", "show", run], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"Error: {os.path.join(run, 'manifest.jsonl')}: is a FIFO, not a regular file " \
                                  f"(not read)"


def test_a_socket_manifest_is_refused(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    os.unlink(os.path.join(run, "manifest.jsonl"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(run, "manifest.jsonl"))
    try:
        with deadline(20):
            assert "is a socket, not a regular file" in error_line(cli("show", run))
    finally:
        sock.close()


# -- line ends -------------------------------------------------------------------------------
@pytest.mark.parametrize("end", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_manifest_and_sites_with_other_line_ends_read_as_written(runs, tmp_path, end):
    good = runs["stats"]
    run = copy_of(good, tmp_path)
    for name in ("manifest.jsonl", "sites.jsonl"):
        with open(os.path.join(good, name), "rb") as f:
            data = f.read()
        with open(os.path.join(run, name), "wb") as f:
            f.write(data.replace(b"\n", end.encode()))
    want, got = RunReader(good), RunReader(run)
    records = list(got.records())
    assert records == list(want.records()) and not got.problems and not got.notes and not got.truncated
    assert got.sites == want.sites and got.sites
    for start, _end, rec in got.entries():  # re-read by offset, as diff does
        assert got.record_at(start) == rec
    assert cli("show", run).output == cli("show", good).output.replace(good, run)
    r = cli("diff", "--no-progress", run, good)
    assert r.exit_code == 0 and "EQUAL" in r.output, r.output


# -- sizes -----------------------------------------------------------------------------------
def test_a_huge_manifest_line_is_one_problem_naming_its_offset(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    path = os.path.join(run, "manifest.jsonl")
    n = len(read_lines(run))
    at = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b'{"seq": 1, "x": "' + b"a" * (8 << 20) + b'"}\n')
    reader = RunReader(run)
    assert len(list(reader.records())) == n
    assert reader.problems == [f"manifest.jsonl line {n + 1} (byte {at}): longer than {MAX_LINE >> 20} MiB (skipped)"]
    r = cli("show", run)
    assert r.exit_code == 2 and f"problem: manifest.jsonl line {n + 1} (byte {at}): longer than" in r.output


def test_an_oversized_run_header_is_refused(runs, tmp_path):
    run = copy_of(runs["stats"], tmp_path)
    info = json.load(open(os.path.join(run, "run.json")))
    info["warnings"] = ["x" * 1000] * (MAX_RUN_BYTES // 1000 + 1)
    json.dump(info, open(os.path.join(run, "run.json"), "w"))
    assert "run.json: is" in error_line(cli("show", run)) and "larger than 16 MiB" in cli("show", run).output


def _rewrite_entry(path: str, name: str, data: bytes, method: int, claim: int | None = None) -> None:
    """Rewrite entry ``name`` of the zip at ``path`` with ``data`` (compressed by ``method``),
    its directory claiming ``claim`` bytes uncompressed where given."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, v in entries:
            z.writestr(n, data if n == name else v, compress_type=method if n == name else zipfile.ZIP_STORED)
    raw = bytearray(buf.getvalue())
    if claim is not None:
        info = zipfile.ZipFile(io.BytesIO(bytes(raw))).getinfo(name)
        struct.pack_into("<I", raw, info.header_offset + 22, claim)  # the local header's size
        at = raw.find(b"PK\x01\x02")
        while raw[at + 46:at + 46 + struct.unpack_from("<H", raw, at + 28)[0]] != name.encode():
            at = raw.find(b"PK\x01\x02", at + 4)
        struct.pack_into("<I", raw, at + 24, claim)  # the central directory's
    with open(path, "wb") as f:
        f.write(raw)


def _data_entry(path: str) -> str:
    with zipfile.ZipFile(path) as z:
        return next(n for n in z.namelist() if n.split("/")[-2:-1] == ["data"])


def test_a_zip_bomb_tensor_file_is_refused_before_it_inflates(runs, tmp_path):
    run = copy_of(runs["save"], tmp_path)
    reader = RunReader(run)
    rec = next(r for r in reader.records() if r.file and r.dtype == "float32")
    path = os.path.join(run, rec.file)
    _rewrite_entry(path, _data_entry(path), b"\0" * (64 << 20), zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < 2 << 20
    tracemalloc.start()
    try:
        for mmap in (True, False):
            with pytest.raises(RecordError, match=r"holds 67108864 bytes of values; the manifest says float32"):
                reader.load_tensor(rec, mmap=mmap)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak
    r = cli("diff", "--no-progress", "--full", run, runs["save"])
    assert r.exit_code == 2 and "holds 67108864 bytes of values" in r.output, r.output


def test_a_tensor_file_that_claims_an_impossible_ratio_is_refused(runs, tmp_path):
    run = copy_of(runs["save"], tmp_path)
    reader = RunReader(run)
    rec = next(r for r in reader.records() if r.file and r.kind == "tensor")
    path = os.path.join(run, rec.file)
    # A record that declares 4 GiB of values, and an entry of a few bytes that claims them.
    big = dataclasses.replace(rec, dtype="float32", shape=[1 << 30], stride=[1], numel=1 << 30)
    # (0xffffffff would mean "see the zip64 field": one below it.)
    _rewrite_entry(path, _data_entry(path), b"\0" * 4096, zipfile.ZIP_DEFLATED, claim=(1 << 32) - 2)
    with pytest.raises(RecordError, match="has an entry that claims to inflate"):
        reader.load_tensor(big, mmap=False)


def test_a_tensor_file_of_other_entries_or_padding_is_refused(runs, tmp_path):
    run = copy_of(runs["save"], tmp_path)
    reader = RunReader(run)
    rec = next(r for r in reader.records() if r.file and r.kind == "tensor")
    path = os.path.join(run, rec.file)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("archive/extra", b"\0" * (1 << 20))
    with pytest.raises(RecordError, match="holds 1048[0-9]+ bytes besides its values"):
        reader.load_tensor(rec)
    with open(path, "wb") as f:  # not a zip: judged by its size
        f.write(b"\x80\x02" + b"\0" * (1 << 20))
    with pytest.raises(RecordError, match=r"is 1048578 bytes; the manifest says"):
        reader.load_tensor(rec)


def test_a_loaded_tensor_must_match_its_record(runs, tmp_path):
    run = copy_of(runs["save"], tmp_path)
    reader = RunReader(run)
    rec = next(r for r in reader.records() if r.file and r.kind == "tensor" and r.numel and r.dtype == "float32")
    path = os.path.join(run, rec.file)
    torch.save(torch.zeros(rec.numel), path)  # same values, another shape
    if len(rec.shape) != 1:
        with pytest.raises(RecordError, match="but the manifest says float32"):
            reader.load_tensor(rec)
    torch.save(torch.zeros(rec.shape, dtype=torch.int32), path)
    with pytest.raises(RecordError, match="holds int32"):
        reader.load_tensor(rec)
    torch.save(torch.zeros(rec.shape).to_sparse(), path)
    with pytest.raises(RecordError, match="sparse|corrupt|not a dense"):
        reader.load_tensor(rec)


# -- hostile run.json sections and record values, through show and diff -----------------------
HOSTILE_HEADERS = [
    ("flight dumps of numbers", {"flight": {"dumps": [1, 2]}}),
    ("flight fired value a list", {"flight": {"fired": {"value": [1]}}}),
    ("flight fired a number", {"flight": {"fired": 3}}),
    ("flight dump calls a string", {"flight": {"dumps": [{"graph_calls": "ab", "reason": "x"}]}}),
    ("flight records of 4,000 digits", {"flight": {"records_dropped": int("9" * 4000)}}),
    ("graph sites a list", {"graphs": {"graph0": {"sites": [1]}}}),
    ("graph site provenance a list", {"graphs": {"graph0": {"sites": {"0": [1]}}}}),
    ("graph site inputs a string", {"graphs": {"graph0": {"sites": {"0": {"inputs": "x"}}}}}),
    ("graph sources of numbers", {"graphs": {"graph0": {"sources": {"w.py": 1}}}}),
]


@pytest.mark.parametrize("case,edit", HOSTILE_HEADERS, ids=[c[0] for c in HOSTILE_HEADERS])
def test_hostile_run_header_sections_are_one_error_line(runs, tmp_path, case, edit):
    run = copy_of(runs["stats"], tmp_path)
    path = os.path.join(run, "run.json")
    info = json.load(open(path))
    info.update(edit)
    json.dump(info, open(path, "w"))
    for args in (["show", run], ["diff", "--no-progress", run, runs["stats"]],
                 ["diff", "--no-progress", runs["stats"], run]):
        assert error_line(cli(*args)).startswith(f"Error: {path}: damaged run header: "), args


HOSTILE_RECORDS = [
    ("a scalar of 4,000 digits", lambda r: r.update(value=int("9" * 4000))),
    ("strides near 2**62", lambda r: r.update(stride=[2**62 - 1] * len(r["shape"]))),
    ("strides spanning 8 TiB", lambda r: r.update(shape=[3, 8], stride=[2**40, 1], numel=24)),
]


@pytest.mark.parametrize("case,edit", HOSTILE_RECORDS, ids=[c[0] for c in HOSTILE_RECORDS])
def test_hostile_record_values_are_problems_in_show_diff_and_repro(runs, tmp_path, case, edit):
    run = copy_of(runs["save"], tmp_path)
    recs = read_lines(run)
    for r in recs:
        if (r.get("kind") == "tensor" and len(r.get("shape") or []) == 2) or (
                case.startswith("a scalar") and r.get("kind") in ("scalar", "symint")):
            edit(r)
    write_lines(run, recs)
    r = cli("show", run)
    assert r.exit_code == 2 and r.output.count("problem: manifest.jsonl line") >= 1
    r = cli("diff", "--no-progress", "--full", run, runs["save"])
    assert r.exit_code == 2 and "problem: run A: manifest.jsonl line" in r.output
    trust = ["--trust"] if "--trust" in cli("repro", "--help").output else []
    for launch in sorted({x["launch"] for x in recs})[:3]:
        # What repro allocates by is only what the reader let through.
        r = cli("repro", run, "--launch", launch, "-o", tmp_path / f"repro{launch}", *trust)
        assert r.exit_code in (0, 1, 2)


# -- names that are not UTF-8 ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "json", "csv"])
def test_a_dump_directory_whose_name_is_not_utf8_is_reported(runs, tmp_path, fmt):
    """Python decodes such a name with lone surrogates: a human-readable report shows
    them as escapes, a JSON or CSV file keeps the path's bytes, and nothing fails."""
    run = copy_of(runs["stats"], tmp_path, name=os.fsdecode(b"run\xff"))
    shown = cli("diff", run, runs["stats"], "-f", fmt)
    assert shown.exit_code == 0, shown.output
    out = tmp_path / os.fsdecode(b"report\xfe.txt")
    written = cli("diff", run, runs["stats"], "-f", fmt, "--all", "-o", str(out))
    assert written.exit_code == 0 and "report\\udcfe.txt" in written.output, written.output
    data = out.read_bytes()
    if fmt == "csv":
        assert data.startswith(b"status,")
    elif fmt == "json":
        assert json.loads(data)["verdict"] and b"run\\udcff" in data
    else:
        assert b"run\\udcff" in data and b"\xff" not in data
