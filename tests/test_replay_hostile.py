"""Replay and repro on dumps that someone else wrote: nothing a dump says runs as code.

What must hold (a small MLP whose ``tanh`` lowering is made 1% too large, recorded at
level save with the Python wrapper, against its fp64 reference; each test edits a copy):

- names and paths holding quotes, triple quotes, newlines, NUL or bytes that are no
  UTF-8 (kernel names, value names, expressions, run.json's file names, the dump
  directory's name) never execute: the marker file their payload would create never
  appears, in ``replay``, ``replay --first``, ``diff --replay``, ``repro`` and the
  ``run.py`` that repro writes (run in a subprocess);
- a copy of the generated source that does not match its recorded hash, or is a link,
  is refused (exit 2); a dump without copies needs ``--trust``;
- a dump of another host or user is refused without ``--trust`` when nobody can be
  asked (exit 2, one line naming --trust), and replays with it;
- ``repro -o`` never deletes the dump, a directory holding it, or a directory that is
  not a previous repro, with or without ``--force``;
- an empty manifest is one line and exit 2;
- the ``run.py`` repro writes exits 1 when the divergence reproduces and 0 when it does
  not, also against a zero reference and with infinite tolerances.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import keyword
import os
import shutil
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug.cli import main as cli_main
from aoti_debug.replay import ReplayError, replay
from aoti_debug.replay.repro import MARKER, write_repro
from aoti_debug.replay.safe import check_expr, cpp_type, identifier, kernel_name, py_literal, value_name
from aoti_debug.runtime.sources import graph_folder
from tests.conftest import only_run
from tests.test_reference import wrong_tanh
from tests.test_replay import _TanhMLP

CULPRIT_LAUNCH = 2  # cpp_fused_mul_tanh_0: the wrong tanh


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(A: the compiled run with the wrong tanh, B: its fp64 reference)."""
    root = tmp_path_factory.mktemp("hostile")
    torch.manual_seed(0)
    model, x = _TanhMLP(), torch.randn(4, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        with wrong_tanh(1.01), aoti_debug.enabled(level="save", dump_dir=str(root / "a")):
            torch.compile(model)(x)
        torch._dynamo.reset()
        with aoti_debug.reference(dtype=torch.float64, dump_dir=str(root / "b")):
            torch.compile(model)(x)
    torch._dynamo.reset()
    a, b = only_run(str(root / "a")), only_run(str(root / "b"))
    info = json.load(open(os.path.join(a, "run.json")))
    assert all("sources" in g for g in info["graphs"].values()), info["graphs"]
    result = replay(a, b, launches=[CULPRIT_LAUNCH])
    assert result.exit_code == 1, str(result)  # the unedited dump replays: the edits are what tests refuse
    return a, b


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """The working directory, where a payload would leave its marker."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


MARK = "pwned"


def payloads() -> list[str]:
    """Strings that run ``touch pwned`` wherever they are pasted into code by hand."""
    run = "__import__('os').system('touch " + MARK + "')"
    return [
        '"""+' + run + '+"""',
        "'''+" + run + "+'''",
        "'+" + run + "+'",
        '"+' + run + '+"',
        "x\n" + run + "\n#",
        "x\\\n" + run,
        "x)\n" + run + "\ndef f(",
        "x\x00" + run,
        "x\udcff\"\"\"+" + run + "+\"\"\"",
        "*/ " + run + " /*",
    ]


def _copy(src: str, dst) -> str:
    shutil.copytree(src, str(dst))
    return str(dst)


def _edit_records(run: str, edit) -> None:
    path = os.path.join(run, "manifest.jsonl")
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    with open(path, "w") as f:
        for r in recs:
            edit(r)
            f.write(json.dumps(r) + "\n")


def _edit_info(run: str, edit) -> None:
    path = os.path.join(run, "run.json")
    with open(path) as f:
        info = json.load(f)
    edit(info)
    with open(path, "w") as f:
        json.dump(info, f)


def _no_marker(where) -> None:
    assert not os.path.exists(os.path.join(str(where), MARK)), "a payload from the dump ran"


def _one_line_error(result, args=()) -> None:
    """Exit 2 and one line; after ``diff``'s report for ``diff --replay``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    if list(args[:1]) != ["diff"]:
        assert len(result.output.strip().splitlines()) == 1, result.output


def _all_commands(a: str, b: str, out) -> list[list[str]]:
    return [
        ["replay", a, b, "--launch", str(CULPRIT_LAUNCH)],
        ["replay", a, b, "--launch", "1", "--launch", "3"],
        ["replay", a, b, "--first", "3"],
        ["diff", a, b, "--replay", "3"],
        ["repro", a, "--launch", str(CULPRIT_LAUNCH), "-r", b, "-o", str(out)],
    ]


def _run_commands(commands: list[list[str]], cwd) -> list:
    """Each CLI command, then any ``run.py`` a ``repro -o DIR`` among them wrote (in a
    subprocess, as a user runs it); no marker may appear after any of them."""
    runner = CliRunner()
    results = []
    for args in commands:
        result = runner.invoke(cli_main, args)
        if args[0] != "diff":  # diff's own report of a name that is no text: not replay's to render
            assert "Traceback" not in result.output and "internal error" not in result.output, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        _no_marker(cwd)
        results.append((args, result))
    for args in commands:
        run_py = os.path.join(args[args.index("-o") + 1], "run.py") if args[0] == "repro" else None
        if run_py is not None and os.path.exists(run_py):
            proc = subprocess.run([sys.executable, run_py], cwd=str(cwd), capture_output=True, text=True, timeout=600)
            _no_marker(cwd)
            results.append((["run.py"], proc))
    return results


def _run_everything(a: str, b: str, cwd, out_name: str = "repro") -> list:
    return _run_commands(_all_commands(a, b, cwd / out_name), cwd)


# ------------------------------------------------------------------ names are never code
@pytest.mark.parametrize("where", ["kernel", "arg", "expr"])
def test_injected_names_never_run(recorded, cwd, where):
    a, b = recorded
    for i, payload in enumerate(payloads()):
        hostile = _copy(a, cwd / f"{where}{i}")

        def edit(r, payload=payload):
            if where == "kernel" and r["launch"] in (1, CULPRIT_LAUNCH, 3):
                r["kernel"] = payload
            elif where == "arg" and r["launch"] in (1, CULPRIT_LAUNCH, 3):
                r["arg"] = payload if r["phase"] == "after" or r["arg"].startswith("buf") else r["arg"]
            elif where == "expr" and r["launch"] in (1, CULPRIT_LAUNCH, 3):
                r["expr"] = payload
        _edit_records(hostile, edit)
        # Every hostile launch in one replay (each refused on its own), and repro of one.
        # diff --replay builds its programs with the same builder: run for one payload
        # only (it also replays launches that are not hostile, a worker each).
        commands = [["replay", hostile, b, "--launch", "1", "--launch", str(CULPRIT_LAUNCH), "--launch", "3"],
                    ["repro", hostile, "--launch", str(CULPRIT_LAUNCH), "-r", b, "-o", str(cwd / f"repro-{where}{i}")]]
        if i == 0:
            commands.append(["diff", hostile, b, "--replay", "3"])
        for args, result in _run_commands(commands, cwd):
            if args[0] == "replay":
                # refused (unjudged: nothing replayable), never run
                assert result.exit_code == 2, (payload, args, result.output)
                assert result.output.count("not replayed") >= 3, (payload, result.output)
        # the unedited dump names none of these payloads as code either: its code is its own
    _no_marker(cwd)


def test_injected_graph_file_names_never_run(recorded, cwd):
    a, b = recorded
    for i, payload in enumerate(payloads()):
        hostile = _copy(a, cwd / f"file{i}")
        folder = os.path.join(hostile, graph_folder("graph0"))
        (original,) = os.listdir(folder)

        def edit(info, payload=payload, original=original):
            g = info["graphs"]["graph0"]
            g["file"] = "/tmp/" + payload + ".py"
            g["sources"] = {payload + ".py": g["sources"][original]}
        _edit_info(hostile, edit)
        for args, result in _run_everything(hostile, b, cwd, f"repro-file{i}"):
            if args[0] in ("replay", "repro", "diff"):
                _one_line_error(result, args)  # refused before anything runs
                assert "not a plain file name" in result.output or "do not include" in result.output, \
                    result.output


def test_injected_dump_directory_names_never_run(recorded, cwd):
    """Every payload at once, each a folder of the dump's path: a path pasted into code
    would carry all of them (and one that broke the program would fail the verdicts)."""
    a, b = recorded
    path = cwd
    for payload in payloads():
        name = payload.replace("/", "_").replace("\x00", "_")
        try:
            (path / name).mkdir()
        except (OSError, UnicodeEncodeError):
            continue  # a name this file system cannot hold
        path = path / name
    assert len(path.relative_to(cwd).parts) >= len(payloads()) - 1, path
    hostile = _copy(a, path / "dump")
    results = _run_everything(hostile, b, cwd, "repro-dir")
    # the culprit is named, the repro written; run.py reproduces it, and ran no payload
    assert results[0][1].exit_code == 1 and "CULPRIT" in results[0][1].output, results[0][1].output
    assert results[4][1].exit_code == 0, results[4][1].output
    assert results[5][1].returncode == 1, results[5][1].stdout + results[5][1].stderr


def test_non_utf8_dump_directory_name(recorded, cwd):
    a, b = recorded
    raw = os.path.join(os.fsencode(str(cwd)), b"dump\xff\xfe\"\"\"")
    try:
        shutil.copytree(os.fsencode(a), raw)
    except OSError:
        pytest.fail("the file system refused a non-UTF-8 name")
    hostile = os.fsdecode(raw)
    results = _run_everything(hostile, b, cwd, "repro-bytes")
    assert results[0][1].exit_code == 1, results[0][1].output  # the culprit, named without a traceback
    assert results[-1][1].returncode == 1, results[-1][1].stdout + results[-1][1].stderr


def test_non_utf8_manifest_bytes(recorded, cwd):
    a, b = recorded
    hostile = _copy(a, cwd / "bytes")
    path = os.path.join(hostile, "manifest.jsonl")
    data = open(path, "rb").read().replace(b'"cpp_fused_mul_tanh_0"', b'"cpp_fused_\xff\xfe"')
    open(path, "wb").write(data)
    for args, result in _run_everything(hostile, b, cwd, "repro-mbytes"):
        if args[0] != "run.py":  # read as replacement characters: refused or replayed, never run as code
            assert result.exit_code in (0, 1, 2), (args, result.output)


# ------------------------------------------------------------------ the code is the dump's own
def test_swapped_copy_is_refused(recorded, cwd):
    a, b = recorded
    hostile = _copy(a, cwd / "swapped")
    folder = os.path.join(hostile, graph_folder("graph0"))
    (name,) = os.listdir(folder)
    with open(os.path.join(folder, name), "a") as f:
        f.write(f"\n__import__('os').system('touch {MARK}')\n")
    runner = CliRunner()
    for args in _all_commands(hostile, b, cwd / "r"):
        result = runner.invoke(cli_main, args)
        _no_marker(cwd)
        _one_line_error(result, args)
        assert "does not match its recorded hash" in result.output.strip().splitlines()[-1], result.output
    with pytest.raises(ReplayError, match="graph0 does not match its recorded hash"):
        replay(hostile, b, launches=[CULPRIT_LAUNCH])
    # --trust does not make a changed copy the dump's own
    result = runner.invoke(cli_main, ["replay", hostile, b, "--launch", str(CULPRIT_LAUNCH), "--trust"])
    _one_line_error(result)


def test_linked_copy_is_refused(recorded, cwd):
    a, b = recorded
    hostile = _copy(a, cwd / "linked")
    folder = os.path.join(hostile, graph_folder("graph0"))
    (name,) = os.listdir(folder)
    shutil.copy(os.path.join(folder, name), cwd / "elsewhere.py")
    os.unlink(os.path.join(folder, name))
    os.symlink(cwd / "elsewhere.py", os.path.join(folder, name))
    result = CliRunner().invoke(cli_main, ["replay", hostile, b, "--launch", str(CULPRIT_LAUNCH)])
    _one_line_error(result)
    assert "not a regular file" in result.output


def test_dump_without_copies_needs_trust(recorded, cwd):
    a, b = recorded
    old = _copy(a, cwd / "old")
    shutil.rmtree(os.path.join(old, "sources"))
    _edit_info(old, lambda info: [g.pop("sources") for g in info["graphs"].values()])
    runner = CliRunner()
    result = runner.invoke(cli_main, ["replay", old, b, "--launch", str(CULPRIT_LAUNCH)])
    _one_line_error(result)
    assert "no verified copy" in result.output and "--trust" in result.output
    result = runner.invoke(cli_main, ["replay", old, b, "--launch", str(CULPRIT_LAUNCH), "--trust"])
    assert result.exit_code == 1 and "CULPRIT" in result.output, result.output
    assert "unverified" in result.output  # said before it was read


@pytest.mark.parametrize("field,value", [("hostname", "another-machine"), ("uid", 12345), ("uid", None)])
def test_other_host_or_user_needs_trust(recorded, cwd, field, value):
    a, b = recorded
    foreign = _copy(a, cwd / "foreign")
    _edit_info(foreign, lambda info: info.update({field: value}))
    runner = CliRunner()
    for args in _all_commands(foreign, b, cwd / "r"):
        result = runner.invoke(cli_main, args)
        _one_line_error(result, args)
        # diff --replay too: asked before the diff, never after a whole report.
        assert len(result.output.strip().splitlines()) == 1, (args, result.output)
        last = result.output.strip().splitlines()[-1]
        assert "--trust" in last and "was recorded" in last, result.output
    result = runner.invoke(cli_main, ["replay", foreign, b, "--launch", str(CULPRIT_LAUNCH), "--trust"])
    assert result.exit_code == 1 and "CULPRIT" in result.output, result.output
    assert "sha256" in result.output  # what it ran, listed
    result = runner.invoke(cli_main, ["diff", foreign, b, "--replay", "1", "--trust"])
    assert result.exit_code == 1 and "CULPRIT" in result.output, result.output


def test_prompt_shows_the_files_and_their_hashes(recorded, cwd):
    a, b = recorded
    foreign = _copy(a, cwd / "asked")
    _edit_info(foreign, lambda info: info.update({"hostname": "another-machine"}))
    asked = []
    with pytest.raises(ReplayError, match="not run"):
        replay(foreign, b, launches=[CULPRIT_LAUNCH], confirm=lambda text: asked.append(text) or False)
    (name,) = os.listdir(os.path.join(foreign, graph_folder("graph0")))
    digest = hashlib.sha256(open(os.path.join(foreign, graph_folder("graph0"), name), "rb").read()).hexdigest()
    assert name in asked[0] and digest in asked[0] and "another-machine" in asked[0]
    result = replay(foreign, b, launches=[CULPRIT_LAUNCH], confirm=lambda text: True)
    assert result.exit_code == 1


# ------------------------------------------------------------------ repro -o
def _tree(path: str) -> dict:
    found = {}
    for root, dirs, files in os.walk(path):
        for n in files:
            p = os.path.join(root, n)
            found[os.path.relpath(p, path)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return found


def test_repro_never_replaces_what_it_did_not_write(recorded, cwd):
    a, b = recorded
    parent = cwd / "parent"
    dump = _copy(a, parent / "run")
    (parent / "unrelated.txt").write_text("keep me")
    before = _tree(str(parent))
    runner = CliRunner()
    for out in (dump, str(parent), os.path.join(dump, "tensors"), os.path.join(dump, "new")):
        for extra in ([], ["--force"]):
            result = runner.invoke(cli_main, ["repro", dump, "--launch", str(CULPRIT_LAUNCH), "-o", out, *extra])
            _one_line_error(result)
            assert "the dump" in result.output, result.output
            assert _tree(str(parent)) == before
    # nor the reference's
    result = runner.invoke(cli_main, ["repro", dump, "--launch", str(CULPRIT_LAUNCH), "-r", b, "-o", b, "--force"])
    _one_line_error(result)
    # a directory that is not a previous repro, with --force
    other = cwd / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    result = runner.invoke(cli_main, ["repro", dump, "--launch", str(CULPRIT_LAUNCH), "-o", str(other), "--force"])
    _one_line_error(result)
    assert MARKER in result.output and (other / "notes.txt").read_text() == "mine"
    # a previous repro is replaced with --force (its marker), refused without
    out = cwd / "repro"
    assert runner.invoke(cli_main, ["repro", dump, "--launch", "1", "-o", str(out)]).exit_code == 0
    assert (out / MARKER).is_file()
    result = runner.invoke(cli_main, ["repro", dump, "--launch", str(CULPRIT_LAUNCH), "-o", str(out)])
    _one_line_error(result)
    result = runner.invoke(cli_main, ["repro", dump, "--launch", str(CULPRIT_LAUNCH), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert json.load(open(out / "meta.json"))["launch"] == CULPRIT_LAUNCH
    assert _tree(str(parent)) == before


# ------------------------------------------------------------------ run.py
def _run_py(directory) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AOTI_DEBUG_LEVEL")}
    return subprocess.run([sys.executable, os.path.join(str(directory), "run.py")], cwd=str(directory), env=env,
                          capture_output=True, text=True, timeout=600)


def _edit_meta(directory, edit) -> None:
    path = os.path.join(str(directory), "meta.json")
    meta = json.load(open(path))
    edit(meta)
    json.dump(meta, open(path, "w"))


def test_run_py_verdicts(recorded, cwd):
    a, b = recorded
    # against the fp64 reference, the wrong tanh reproduces
    culprit = write_repro(a, CULPRIT_LAUNCH, str(cwd / "culprit"), reference=b)
    proc = _run_py(culprit)
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout and "eager's own" in proc.stdout, \
        proc.stdout + proc.stderr
    # against the run's own outputs, it does not
    own = write_repro(a, CULPRIT_LAUNCH, str(cwd / "own"))
    proc = _run_py(own)
    assert proc.returncode == 0 and "not reproduced" in proc.stdout, proc.stdout + proc.stderr
    # a zero reference with eager's own error zero: any error is infinitely many times it
    zeros = cwd / "zeros"
    shutil.copytree(culprit, zeros)
    for o in json.load(open(zeros / "meta.json"))["outputs"]:
        torch.save(torch.zeros_like(torch.load(zeros / o["expected"], weights_only=True)), zeros / o["expected"])
    _edit_meta(zeros, lambda m: [o.update(eager_error=0.0, eps=0.0) for o in m["outputs"]])
    proc = _run_py(zeros)
    assert proc.returncode == 1 and "infx eager's own" in proc.stdout, proc.stdout + proc.stderr
    # infinite tolerances (no fp64 verdict): every finite difference is within them
    _edit_meta(zeros, lambda m: [o.update(eager_error=None, atol=float("inf"), rtol=float("inf"))
                                 for o in m["outputs"]])
    proc = _run_py(zeros)
    assert proc.returncode == 0 and "not reproduced" in proc.stdout, proc.stdout + proc.stderr
    # eager itself not finite: nothing to hold against (as diff's verdict)
    _edit_meta(culprit, lambda m: [o.update(eager_error=float("nan")) for o in m["outputs"]])
    proc = _run_py(culprit)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------ nothing to judge
def test_empty_manifest_is_bad_input(recorded, cwd):
    a, b = recorded
    empty = _copy(a, cwd / "empty")
    open(os.path.join(empty, "manifest.jsonl"), "w").close()
    runner = CliRunner()
    for args in (["replay", empty, b], ["replay", empty, b, "--first", "2"], ["replay", a, empty],
                 ["replay", empty, b, "--launch", "1"]):
        result = runner.invoke(cli_main, args)
        _one_line_error(result)
        assert "no records" in result.output, result.output


# ------------------------------------------------------------------ the builder's checks
def test_builder_refuses_what_is_not_plain():
    for bad in payloads() + ["", "1x", "a.b", "import", "__class__", "_aoti_debug", "é"]:
        with pytest.raises(ReplayError):
            identifier(bad, "name")
    for bad in payloads() + ["buf0[x]", "buf0[0][1]", "buf0#x", "buf0#1#2", "len", "exec"]:
        with pytest.raises(ReplayError):
            value_name(bad)
    assert value_name("buf30[0]") == ("buf30", 0) and value_name("arg0_1") == ("arg0_1", None)
    assert value_name("buf4#2") == ("buf4", None)
    # Literals a user-defined Triton kernel is passed: never spelled as names (v_32).
    from aoti_debug.replay.program import _identifier

    for literal in ("32", "-1.5e-05", "4096", "True", "None"):
        assert value_name(literal) == (literal, None)
        assert _identifier(literal).isidentifier() and not keyword.iskeyword(_identifier(literal)), literal
    for bad in ("32)", "1_000", "0x10", "1e", "--1", "3.", "True()"):
        with pytest.raises(ReplayError):
            value_name(bad)
    assert kernel_name("extern_kernels.mm", "python") and kernel_name("torch.ops.aten.__and__.Tensor", "python")
    for bad in payloads() + ["extern_kernels.mm"]:
        with pytest.raises(ReplayError):
            kernel_name(bad, "cpp")
    for ok in ("const float*", "float*", "const int64_t", "const  at::BFloat16 *", "c10::complex<float>*"):
        cpp_type(ok)
    for bad in ["const float*, int x) {} void f(", "std::string", "float*/*", "int; system(\"x\")"]:
        with pytest.raises(ReplayError):
            cpp_type(bad)
    check_expr("reinterpret_tensor(buf3, (2, 12, 256), (3072, 256, 1), 0)")
    check_expr("buf30[0]")
    for bad in payloads() + ["buf0.data_ptr()", "__import__('os')", "eval('1')", "(lambda: 0)()", "'x'",
                             "reinterpret_tensor(*a)", "[x for x in y]"]:
        with pytest.raises(ReplayError):
            check_expr(bad)
    for s in payloads():
        assert eval(py_literal(s)) == s and "\n" not in py_literal(s) and py_literal(s).isascii()


def test_an_input_larger_than_free_memory_is_a_note_not_an_allocation():
    """A dump may declare any tensor size validation lets through (up to a TiB); replay
    checks it against the free memory before it allocates anything."""
    from aoti_debug.format.schema import Record
    from aoti_debug.replay.engine import materialise

    rec = Record(seq=1, launch=7, graph="graph0", wrapper="python", kernel="k", op="k", kernel_call=0,
                 phase="before", arg="in_ptr0", dtype="float32", shape=[1 << 38], stride=[1], device="cpu",
                 numel=1 << 38)
    with pytest.raises(ReplayError, match=r"in_ptr0 of launch 7 needs 1024.0 GiB and cpu has .* GiB free"):
        materialise(rec, None)
    small = dataclasses.replace(rec, shape=[2, 3], stride=[3, 1], numel=6)
    assert materialise(small, None).shape == (2, 3)
