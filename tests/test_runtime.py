"""The runtime on its own: odd tensors, failures that must not reach the model, limits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import aoti_debug
from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
from aoti_debug.runtime import hooks, session
from aoti_debug.runtime.stats import tensor_stats
from examples.models import MLP
from tests.conftest import REPO, load_record, only_run, records, run_dirs


def _site(kernel, names_in, names_out=()):
    meta = lambda names, role: tuple(SiteArg(n, role, "unknown", n) for n in names)  # noqa: E731
    return Site("", kernel, kernel, meta(names_in, "input"), meta(names_out, "output"))


ODD = {
    "empty": torch.empty(0, 3),
    "noncontig": torch.arange(24.0).view(4, 6).t()[1:, ::2],
    "bf16": torch.randn(5, 7).bfloat16(),
    "fp16": torch.randn(9).half(),
    "fp8": torch.randn(6).to(torch.float8_e4m3fn),
    "bool": torch.tensor([True, False, True]),
    "complex": torch.randn(3, 2, dtype=torch.complex64),
    "int8": torch.tensor([-3, 0, 7], dtype=torch.int8),
    "int64": torch.arange(10),
    "scalar0d": torch.tensor(3.5),
    "expanded": torch.randn(3, 1).expand(3, 4),
    "nan_inf": torch.tensor([1.0, float("nan"), float("inf"), -2.0]),
}


def test_odd_tensors_are_saved_exactly(fresh_session):
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    names = list(ODD)
    g.launch(_site("k", names), [ODD[n] for n in names])
    g.done(_site("k", names), [])
    aoti_debug.flush()
    run_dir = only_run(str(fresh_session))
    recs = {r["arg"]: r for r in records(run_dir)}
    assert set(recs) == set(names)
    for n, t in ODD.items():
        r = recs[n]
        assert "error" not in r, r
        loaded = load_record(run_dir, r)
        assert loaded.dtype == t.dtype and list(loaded.shape) == list(t.shape) == r["shape"]
        assert r["stride"] == list(t.stride())
        if t.dtype == torch.float8_e4m3fn:
            assert torch.equal(loaded.view(torch.uint8), t.view(torch.uint8))
        else:
            assert torch.equal(loaded, t) or (t.is_floating_point() and torch.allclose(loaded, t, equal_nan=True))
        stats, checksum = tensor_stats(t)
        assert r["checksum"] == checksum
    assert recs["nan_inf"]["stats"] == {"min": -2.0, "max": 1.0, "mean": -0.5, "std": pytest.approx(2.1213203, 1e-6),
                                        "absmax": 2.0, "nan": 1, "inf": 1}
    assert recs["empty"]["stats"]["min"] is None and recs["empty"]["numel"] == 0


def test_scalars_are_recorded_as_scalars(fresh_session):
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION)
    site = Site("", "k", "k", (SiteArg("s0", "input", "symint", "s0"), SiteArg("alpha", "input", "scalar", "1.5"),
                               SiteArg("flag", "input", "scalar", "True")))
    g.launch(site, (7, 1.5, True))
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [(r["kind"], r["value"], r["dtype"]) for r in recs] == [("symint", 7, "int"), ("scalar", 1.5, "float"),
                                                                   ("scalar", True, "bool")]


def test_unwritable_directory_warns_once_and_model_runs(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the dump directory should be")
    monkeypatch.setenv("AOTI_DEBUG_DIR", str(blocker))
    session.reset()
    session._warned.clear()
    model = MLP().eval()
    x = torch.randn(2, 16)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x)
        with aoti_debug.enabled(level="save"):
            fn = torch.compile(model)
            out1 = fn(x)
            out2 = fn(x)
    aoti_debug.flush()
    err = capfd.readouterr().err
    assert err.count("cannot create dump directory") == 1, err
    assert any(k == "dump-dir" for k, _ in session.FAILURES)
    torch.testing.assert_close(out1, expected)
    torch.testing.assert_close(out2, expected)
    session.reset()


def test_full_disk_is_recorded_per_record(fresh_session, monkeypatch, capfd):
    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hooks.torch, "save", no_space)
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    x = torch.randn(4)
    g.launch(_site("k", ["a", "b"]), [x, x + 1])
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert len(recs) == 2
    assert all("No space left" in r["error"] and "file" not in r and r["stats"] for r in recs)
    assert capfd.readouterr().err.count("No space left") == 1
    assert os.listdir(os.path.join(only_run(str(fresh_session)), "tensors")) == []


def test_max_bytes_stops_files_but_not_stats(fresh_session, monkeypatch):
    monkeypatch.setenv("AOTI_DEBUG_MAX_BYTES", "100")
    session.reset()
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    ts = [torch.randn(10) for _ in range(4)]  # 40 bytes each
    g.launch(_site("k", ["a", "b", "c", "d"]), ts)
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert ["file" in r for r in recs] == [True, True, False, False]
    assert all(r["stats"] for r in recs) and recs[3]["skipped"].startswith("AOTI_DEBUG_MAX_BYTES")


def test_values_are_captured_at_launch_time(fresh_session):
    """Later in-place writes (buffer reuse) must not change what was recorded."""
    g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
    x = torch.ones(1000)
    g.launch(_site("k", ["x"]), [x])
    x.mul_(5)
    aoti_debug.flush()
    run_dir = only_run(str(fresh_session))
    rec = records(run_dir)[0]
    assert torch.equal(load_record(run_dir, rec), torch.ones(1000))


def test_killed_run_leaves_a_valid_manifest(tmp_path):
    code = textwrap.dedent(
        """
        import os, signal, torch, aoti_debug
        from aoti_debug.format.protocol import PROTOCOL_VERSION, Site, SiteArg
        from aoti_debug.runtime import hooks
        g = hooks.graph(None, "save", False, protocol=PROTOCOL_VERSION)
        site = Site("", "k", "k", (SiteArg("x", "input", "tensor", "x"),))
        for i in range(50):
            g.launch(site, (torch.randn(1000),))
        aoti_debug.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = dict(os.environ, AOTI_DEBUG_DIR=str(tmp_path), PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == -9
    recs = records(only_run(str(tmp_path)))
    assert len(recs) == 50 and [r["seq"] for r in recs] == list(range(1, 51))


def test_run_json(fresh_session):
    g = hooks.graph("/some/wrapper.py", "stats", False, protocol=PROTOCOL_VERSION)
    g.launch(_site("k", ["a"]), [torch.ones(2)])
    aoti_debug.flush()
    with open(os.path.join(only_run(str(fresh_session)), "run.json")) as f:
        info = json.load(f)
    assert info["format_version"] == 1 and info["level"] == "stats" and info["pid"] == os.getpid()
    assert info["graphs"]["graph0"]["file"] == "/some/wrapper.py"
    assert info["torch_version"] == torch.__version__


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "torchrun")),
                    reason="torchrun not installed")
def test_torchrun_two_ranks_two_directories(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(
        """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        m = torch.nn.Linear(8, 8).eval()
        with torch.no_grad():
            y = torch.compile(m)(torch.full((2, 8), float(dist.get_rank())))
        dist.all_reduce(y)
        dist.destroy_process_group()
        """
    ))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, AOTI_DEBUG_LEVEL="stats", AOTI_DEBUG_DIR=str(tmp_path / "d"), PYTHONPATH=REPO,
               OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", "29517", str(script)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = run_dirs(str(tmp_path / "d"))
    assert [os.path.basename(p) for p in runs] == ["rank0", "rank1"]
    assert os.path.dirname(runs[0]) == os.path.dirname(runs[1]), "both ranks share one run id"
    for p in runs:
        with open(os.path.join(p, "run.json")) as f:
            info = json.load(f)
        assert info["world_size"] == 2 and os.path.basename(p) == f"rank{info['rank']}"
        assert records(p)


class _FakeRing:
    """The device ring's contract on CPU tensors: rows summarised now, values readable only
    after a flush ships them (``session.BEFORE_FLUSH``), as on a GPU."""

    def __init__(self):
        import threading

        self.rows: list[tuple] = []
        self.shipped = threading.Event()

    def stats(self, handle, items, rows):
        from aoti_debug.runtime.stats import device_summary

        arrival = self

        first = len(self.rows)
        for i in rows:
            s, c = device_summary(items[i][1])
            self.rows.append((s.tolist(), int(c)))
        return arrival, {i: first + j for j, i in enumerate(rows)}

    # Arrival's interface
    def synchronize(self):
        assert self.shipped.wait(30), "a record waited on an unshipped ring"

    def values(self):
        self.synchronize()
        return [r[0] for r in self.rows], [r[1] for r in self.rows]

    def host(self):
        """The rows as the device ring's host copy holds them (ring_records reads them)."""
        self.synchronize()
        self._host = (torch.tensor([r[0] for r in self.rows], dtype=torch.float64),
                      torch.tensor([r[1] for r in self.rows], dtype=torch.int64))
        return self._host[0].data_ptr(), self._host[1].data_ptr()

    def ship(self):
        self.shipped.set()


@pytest.mark.parametrize("level", ["stats", "print"])
def test_deferred_stats_keep_launch_order(fresh_session, monkeypatch, capfd, level):
    """Records whose stats wait for a device ring are written in launch order, after
    records of later launches that had nothing to wait for; print lines too."""
    ring = _FakeRing()
    monkeypatch.setattr(hooks.GraphHandle, "_ring_stats", lambda self, items, rows: ring.stats(self, items, rows))
    monkeypatch.setattr(session, "BEFORE_FLUSH", [ring.ship])
    g = hooks.graph(None, level, False, protocol=PROTOCOL_VERSION)
    g._library = None  # no runtime library: every tensor takes the (fake) ring
    a, b = torch.randn(4, 5), torch.arange(6.0)
    for k in range(3):
        site = Site("", f"k{k}", f"k{k}", (SiteArg("x", "input", "unknown", "x"), SiteArg("n", "input", "scalar", "n")),
                    (SiteArg("y", "output", "unknown", "y"),))
        g.launch(site, (a, 7))
        g.done(site, (b * k,))
    assert not ring.shipped.is_set()
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert [r["seq"] for r in recs] == list(range(1, 10))
    for r in recs:
        if r["kind"] == "tensor":
            t = a if r["phase"] == "before" else b * int(r["kernel"][1:])
            assert r["checksum"] == tensor_stats(t)[1], r
    if level == "print":
        err = capfd.readouterr().err
        launches = [int(line.split("launch=")[1].split()[0]) for line in err.splitlines() if " launch=" in line]
        assert launches == [1, 1, 1, 2, 2, 2, 3, 3, 3], err


def test_deferred_ring_records_written_by_the_library_keep_launch_order(fresh_session, monkeypatch, library):
    """The same, with the runtime library writing the ring records from the writer thread
    (ring_records), CPU records of later launches queued between them."""
    from aoti_debug.runtime import ring_records

    ring = _FakeRing()
    written = []
    encode = ring_records.RingLines.encode
    monkeypatch.setattr(ring_records.RingLines, "encode", lambda self, jobs: written.append(len(jobs)) or
                        encode(self, jobs))
    monkeypatch.setattr(hooks.GraphHandle, "_ring_stats", lambda self, items, rows: ring.stats(self, items, rows))
    monkeypatch.setattr(session, "BEFORE_FLUSH", [ring.ship])
    g = hooks.graph(None, "stats", False, protocol=PROTOCOL_VERSION, native=library.path)
    g._records = None
    a, b = torch.randn(4, 5), torch.arange(6.0)
    for k in range(3):
        site = Site("", f"k{k}", f"k{k}", (SiteArg("x", "input", "unknown", "x"), SiteArg("n", "input", "scalar", "n")),
                    (SiteArg("y", "output", "unknown", "y"),))
        with monkeypatch.context() as m:  # the ring's tensors, then CPU tensors summarised at once
            m.setattr(hooks.GraphHandle, "_native_stats", lambda self, items: list(range(len(items))))
            g.launch(site, (a, 7))
        g.done(site, (b * k,))
    assert not ring.shipped.is_set()
    aoti_debug.flush()
    recs = records(only_run(str(fresh_session)))
    assert sum(written) == 3
    assert [r["seq"] for r in recs] == list(range(1, 10))
    for r in recs:
        if r["kind"] == "tensor":
            t = a if r["phase"] == "before" else b * int(r["kernel"][1:])
            assert r["checksum"] == tensor_stats(t)[1], r


def test_flush_finds_a_cpp_runtime_loaded_after_an_earlier_look(tmp_path):
    """aoti_debug.flush() remembers which libraries export the C++ runtime's flush while
    nothing is loaded or unloaded; a library loaded after that first look is still flushed."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler (g++/c++ or $CXX)")
    src = tmp_path / "late.cpp"
    src.write_text(f'extern "C" {{ int flushed = 0; void {session.CPP_FLUSH_SYMBOL}() {{ ++flushed; }} }}\n')
    lib = tmp_path / "liblate.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    child = textwrap.dedent(f"""
        import ctypes, aoti_debug
        from aoti_debug.runtime import session
        aoti_debug.flush(); aoti_debug.flush()  # the list is read, then taken from the cache
        before = session._load_generation()
        late = ctypes.CDLL({str(lib)!r})
        assert session._load_generation() != before, (before, session._load_generation())
        aoti_debug.flush(); aoti_debug.flush()
        print("FLUSHED", ctypes.c_int.in_dll(late, "flushed").value)
    """)
    out = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "FLUSHED 2" in out.stdout
