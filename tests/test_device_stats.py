"""Stats of CUDA tensors on the device in the C++ runtime (codegen/device_stats.py,
native/device_stats.h), without a GPU: the stats kernel compiled for sm_90 by Triton
(cubins, their launch parameters), the pack that carries them and its parser, and the
whole runtime recording "CUDA" tensors through a stand-in libcuda.so.1 and AOTI shim
(tests/fake_cuda/): the launches it makes against ``fused_stats.plan``, what it copies,
records equal to the host path's, and every way it falls back. GPU tests:
tests/gpu/test_cpp_device_stats_gpu.py."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest
import torch

from aoti_debug.codegen import cpp_runtime, device_stats
from aoti_debug.format.schema import print_line
from aoti_debug.runtime import fused_stats
from tests.conftest import REPO, STATS_SCRATCH, fake_stats_images, only_run, records

CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")
FAKE = os.path.join(REPO, "tests", "fake_cuda")
SEGMENT_ROWS = 2048  # device_stats.h's ring: rows per segment (AOTI_DEBUG_DEVICE_SEGMENT_ROWS)
#: Harnesses built with smaller rings (rows per segment, segments): a segment smaller
#: than a graph call's 25 device rows, a ring smaller than one call, segments smaller than a side.
SMALL_RINGS = ((14, 1), (13, 2), (8, 2))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The stand-in libcuda.so.1 and the harness (tests/fake_cuda), built once."""
    if CXX is None:
        pytest.fail("no C++ compiler: the C++ runtime cannot be checked")
    d = tmp_path_factory.mktemp("device_stats")
    cpp_runtime.write_constants(str(d))
    (d / "runtime.h").write_text(cpp_runtime.runtime_source(None))
    lib = d / "lib"
    lib.mkdir()
    common = [CXX, "-std=c++17", "-O1", "-Wall", "-Wno-unused-function", "-I", str(d), "-I", cpp_runtime.NATIVE_DIR,
              "-I", INCLUDE]
    for cmd in ([*common, "-shared", "-fPIC", os.path.join(FAKE, "libcuda.cpp"), "-o", str(lib / "libcuda.so.1"),
                 "-pthread"],
                [*common, os.path.join(FAKE, "harness.cpp"), "-o", str(d / "harness"), "-ldl", "-pthread"],
                *([*common, f"-DAOTI_DEBUG_DEVICE_SEGMENT_ROWS={rows}", f"-DAOTI_DEBUG_DEVICE_SEGMENTS={segs}",
                   os.path.join(FAKE, "harness.cpp"), "-o", str(d / f"harness-ring{rows}x{segs}"), "-ldl", "-pthread"]
                  for rows, segs in SMALL_RINGS)):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-4000:]
    return d


def fake_pack(path, capability=90, leave_out=(12,)) -> str:
    """A pack of every variant but the kinds ``leave_out``, each "cubin" naming its variant
    for the stand-in driver."""
    images = [device_stats.KernelImage(v, v.kernel,
                                       b"\x7fELFFAKE" + struct.pack("<5I", v.kind, v.width, v.vec, v.cols, v.dense),
                                       4, 32, (*device_stats.ARG_TYPES, *STATS_SCRATCH))
              for v in device_stats.variants() if v.kind not in leave_out]
    path.write_bytes(device_stats.write_pack(capability, images, device_stats.dtypes()))
    return str(path)


def run_harness(built, tmp_path, name, pack, mode="file", level="stats", args=(), harness="harness", **env):
    root = tmp_path / name
    log = tmp_path / f"{name}.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AOTI_DEBUG_", "FAKE_CU_"))}
    environ.update(LD_LIBRARY_PATH=str(built / "lib"), AOTI_DEBUG_DIR=str(root), AOTI_DEBUG_RUN_ID="run",
                   FAKE_CU_LOG=str(log), **env)
    proc = subprocess.run([str(built / harness), pack, mode, level, *args], capture_output=True, text=True,
                          env=environ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    copied = int(re.search(r"copied=(\d+)", proc.stdout).group(1))
    # Every run: no device value copied before a device synchronisation.
    assert re.search(r"unsynced=0\b", proc.stdout), proc.stdout
    calls = log.read_text().splitlines() if log.exists() else []
    recs = records(only_run(str(root))) if level != "names" else []
    return recs, calls, copied, proc.stderr


def printed_lines(err: str) -> list[str]:
    """A harness's level-print lines on stderr (the runtime's, one per record)."""
    return [x for x in err.splitlines() if x.startswith(("[aoti_debug] before", "[aoti_debug] after"))]


def launches(calls: list[str]) -> list[tuple[dict, list[dict]]]:
    """The logged launches: the launch's fields and its table rows."""
    out = []
    for line in calls:
        if line.startswith("launch "):
            out.append((dict(kv.split("=", 1) for kv in line.split()[1:]), []))
        elif line.startswith("row "):
            out[-1][1].append({k: int(v) for k, v in (kv.split("=", 1) for kv in line.split()[1:])})
    return out


# --------------------------------------------------------------------------- the kernel for sm_90
@pytest.fixture(scope="module")
def real_pack(tmp_path_factory):
    """Four variants compiled for sm_90 by Triton, without a GPU (the rest: the GPU tests):
    two of the contiguous kernel, one of the strided one, one of the dense one."""
    chosen = [v for v in device_stats.variants()
              if (v.kind, v.vec, v.cols, v.dense) in ((9, 4, 0, 0), (10, 1, 0, 0), (9, 4, 64, 0), (9, 4, 0, 1024))]
    logger = logging.getLogger("aoti_debug")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = seen.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        images = device_stats.compile_images(90, chosen, workers=2)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not any("workers failed" in r.getMessage() for r in seen)  # compiled by the worker processes
    path = tmp_path_factory.mktemp("real_pack") / "pack-sm90.bin"
    path.write_bytes(device_stats.write_pack(90, images, device_stats.dtypes()))
    return images, str(path)


def test_cubins_for_sm90_are_built_without_a_gpu(real_pack):
    images, path = real_pack
    assert [(im.variant.kind, im.variant.vec, im.variant.cols, im.variant.dense) for im in images] == [
        (9, 4, 0, 1024), (9, 4, 0, 0), (9, 4, 64, 0), (10, 1, 0, 0)]
    for im in images:
        assert im.image[:4] == b"\x7fELF" and im.name.encode() in im.image and len(im.image) > 1000
        assert im.name == im.variant.kernel and im.num_warps == fused_stats.NUM_WARPS
        assert 0 <= im.shared <= device_stats.MAX_SHARED
        # The PTX entry's parameters: the launcher's seven, then Triton's scratch pointers.
        assert im.params[:7] == device_stats.ARG_TYPES and set(im.params[7:]) <= {"u64"}
    pack = device_stats.read_pack(open(path, "rb").read())
    assert pack["signature"] == " ".join(images[0].params) and pack["scratch"] == len(images[0].params) - 7
    assert (pack["block"], pack["programs_per_sm"], pack["min_tiles"]) == (
        fused_stats.BLOCK, fused_stats.PROGRAMS_PER_SM, fused_stats.MIN_TILES)
    assert all(k["offset"] % device_stats.IMAGE_ALIGN == 0 for k in pack["kernels"])
    assert [k["image"] for k in pack["kernels"]] == [im.image for im in images]
    assert [(k["cols"], k["dense"], k["table_width"]) for k in pack["kernels"]] == [
        (0, 1024, fused_stats._DENSE_TW), (0, 0, 0), (64, 0, fused_stats._PERM_TW), (0, 0, 0)]


def test_the_runtime_accepts_what_triton_built(built, real_pack):
    """The C++ parser takes the real pack: its parameter signature is the one it launches."""
    images, path = real_pack
    out = subprocess.run([str(built / "harness"), path, "parse"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == f"ok|{len(images)}|{len(device_stats.dtypes())}", lines
    assert lines[1:] == [f"{im.variant.kind} {im.variant.vec} {im.num_warps} {im.shared} {im.variant.width} "
                         f"{im.variant.cols} {im.name}" for im in images], lines


def test_variants_and_dtypes_cover_what_the_python_runtime_launches():
    kinds = {spec for spec in fused_stats._KINDS.values()}
    got = {(v.kind, v.width, v.is_float): set() for v in device_stats.variants()}
    for v in device_stats.variants():
        got[(v.kind, v.width, v.is_float)].add(v.vec)
    assert set(got) == kinds and all(vecs == {1, 16 // k[1]} for k, vecs in got.items())
    # The strided kernel for the floating kinds strided tensors have, at every tile width
    # unvectorised and vectorised where a tile row holds a vector.
    perm = {(v.kind, v.vec, v.cols) for v in device_stats.variants() if v.cols}
    assert perm == {(kind, vec, cols) for kind in device_stats.PERM_KINDS for cols in device_stats.PERM_COLS
                    for vec in (1, 16 // next(w for k, w, _f in kinds if k == kind)) if cols >= vec}
    # The dense kernel for the same kinds, at the block and half of it, vectorised and not.
    dense = {(v.kind, v.vec, v.dense) for v in device_stats.variants() if v.dense}
    assert dense == {(kind, vec, block) for kind in device_stats.PERM_KINDS for block in device_stats.dense_blocks()
                     for vec in (1, 16 // next(w for k, w, _f in kinds if k == kind))}
    assert device_stats.dense_blocks() == (fused_stats.BLOCK, fused_stats.BLOCK // 2)
    names = {n: (kind, units) for n, kind, units in device_stats.dtypes()}
    for dtype, (code, _w, _f) in fused_stats._KINDS.items():
        assert names[str(dtype).replace("torch.", "")] == (code, 1)
    assert names["complex64"] == (fused_stats._KINDS[torch.float32][0], 2)
    assert names["complex32"] == (fused_stats._KINDS[torch.float16][0], 2)
    # Only what fused_stats._prepare reads: the fnuz float8 formats stay on the host path.
    assert "float8_e4m3fnuz" not in names and "quint8" not in names


def test_bad_packs_are_refused(built, tmp_path):
    good = open(fake_pack(tmp_path / "good.bin"), "rb").read()

    def verdict(data: bytes) -> str:
        p = tmp_path / "bad.bin"
        p.write_bytes(data)
        out = subprocess.run([str(built / "harness"), str(p), "parse"], capture_output=True, text=True, check=True)
        return out.stdout.splitlines()[0].split("|")[0]

    assert verdict(good) == "ok"
    bad_sig = good.replace(b"u64 u64 u32 u64 u64 u64 u32 u64 u64", b"u64 u64 u32 u64 u64 u64 u64 u64 u64")
    kernels = device_stats.read_pack(good)["kernels"]
    first_image = kernels[0]["offset"]
    strided = 64 + 64 * next(i for i, k in enumerate(kernels) if k["cols"])  # its entry: cols at +24, width at +28

    def entry(at: int, value: int) -> bytes:
        return good[:strided + at] + struct.pack("<I", value) + good[strided + at + 4:]

    dense = 64 + 64 * next(i for i, k in enumerate(kernels) if k["dense"])  # its tile at +56 (8 bytes)

    def dense_entry(at: int, value: int, size: str = "<I") -> bytes:
        n = struct.calcsize(size)
        return good[:dense + at] + struct.pack(size, value) + good[dense + at + n:]

    cases = {
        "not a stats pack": b"X" + good[1:],
        "another version": good[:8] + struct.pack("<I", 1) + good[12:],
        "size is wrong": good[:-1],
        "parameters": bad_sig,
        "malformed": good[:first_image] + b"\0" + good[first_image + 1:],
        "do not fit": good[:16] + struct.pack("<I", 100000) + good[20:],
    }
    bad_entries = {"tile width not a power of two": entry(24, 48), "tile width above the block": entry(24, 2048),
                   "another table width": entry(28, 24), "a table width without a tile width": entry(24, 0),
                   "a dense tile not a power of two": dense_entry(56, 768, "<Q"),
                   "a dense tile above the block": dense_entry(56, 2048, "<Q"),
                   "a dense tile with a tile width": dense_entry(24, 64),
                   "a dense tile with the strided table": dense_entry(28, fused_stats._PERM_TW),
                   "a strided entry with a dense tile": good[:strided + 56] + struct.pack("<Q", 1024) +
                   good[strided + 64:]}
    for why, data in bad_entries.items():
        assert "malformed" in verdict(data), why
    for why, data in cases.items():
        assert why in verdict(data), why


# --------------------------------------------------------------------------- the runtime, with a stand-in driver
def _key(r):
    return (r["seq"], r["phase"], r["arg"])


def test_device_records_equal_the_host_path_and_copy_only_results(built, tmp_path):
    pack = fake_pack(tmp_path / "pack.bin")
    dev, calls, copied, err = run_harness(built, tmp_path, "device", pack)
    host, host_calls, host_copied, _ = run_harness(built, tmp_path, "host", pack, AOTI_DEBUG_FUSED_STATS="0")
    assert not host_calls and "warning" not in err, err
    assert dev == host  # every record, stats and checksum to the bit (the stand-in uses the runtime's summarize)
    tensors = [r for r in dev if r["kind"] == "tensor" and not r.get("uninitialised")]
    assert tensors and all(r["stats"] is not None and r["checksum"] and "error" not in r for r in tensors)
    assert {r["dtype"] for r in tensors} >= {"float32", "bfloat16", "float16", "int64", "bool", "complex64",
                                             "float8_e4m3fn", "uint16", "float64"}
    # Only the uint16 tensor (no kernel in this pack) is copied: 300 elements, 4 sides.
    assert copied == 300 * 2 * 4 and host_copied > 100 * copied
    found = launches(calls)
    # 4 sides; per side one launch per kind with a kernel: f32, bf16, f16, i64, bool, f8, f64 (complex64 as f32),
    # and the strided kernel's for the transposed float32 one, read in place.
    assert len(found) == 4 * 8, [f for f, _ in found]
    assert [int(f["cols"]) for f, _ in found].count(64) == 4
    found = [(f, rows) for f, rows in found if f["cols"] == "0"]  # (the strided ones: test_strided_tensors_...)
    sms = 132
    for fields, rows in found:
        width = int(fields["width"])
        assert fields["block"] == f"{32 * fused_stats.NUM_WARPS},1,1" and fields["shared"] == "32"
        assert fields["scratch"] == "0,0" and fields["extra"] in ("(nil)", "0") and fields["stream"] == "0x5151"
        assert int(fields["k"]) == len(rows) and all(r["counter"] == 0 for r in rows)
        numels = [r["n"] for r in rows]
        # The plan is relative: the base's alignment and each tensor's offset from it, as logged.
        base = (1 << 20) + int(fields["base"])
        ptrs = [base + r["q"] * width * int(fields["vec"]) for r in rows]
        _b, vec, table, programs = fused_stats.plan(ptrs, numels, [r["row"] for r in rows], width, base,
                                                    fused_stats.BLOCK, fused_stats.PROGRAMS_PER_SM * sms,
                                                    fused_stats.MIN_TILES)
        assert int(fields["grid"].split(",")[0]) == programs and fields["grid"].endswith(",1,1")
        assert table == [x for r in rows for x in (r["q"], r["n"], r["first"], r["nprog"], r["per"], r["row"])]
        assert int(fields["vec"]) == vec
        if vec > 1:
            assert all(r["mod16"] == 0 for r in rows if r["n"])
    kinds_vec = {(int(f["kind"]), int(f["vec"])) for f, _ in found}
    assert (9, 1) in kinds_vec and (9, 4) in kinds_vec  # after: the misaligned float32 makes its group unvectorised
    loaded = {tuple(x.split()[1:]) for x in calls if x.startswith("load ")}
    big = [r for _f, rows in found for r in rows if r["n"] == 3_000_000]
    assert big and all(r["nprog"] > 100 for r in big)
    # Level stats: the results (9 doubles per row) go to a segment of the device ring, copied
    # back once per graph call (shipped when the next call starts, and at exit), not per
    # side: the used rows only (their stats, then their checksums), and no stream
    # synchronisation but the two when the buffers are first made.
    # Rows: before, 12 of the 15 values (not the CPU, uint16 and uninitialised ones); after, 13,
    # from row 16 (a side's rows start at a multiple of 8).
    dtoh = [int(x.split()[1]) for x in calls if x.startswith("dtoh ")]
    assert dtoh == [29 * 64, 29 * 8] * 2
    assert calls.count("event-record") == 2 and calls.count("sync") == 2
    # Each call in a segment of its own: the before side's rows from 0, the after side's from 16. A
    # table's rows count from its side's first (the same table call after call): the launch moves
    # `out` by 16 rows and passes a k_total 7 * 16 / 8 lower, so that the checksums, at
    # out + 8 * k_total + row, stay where the segment has them.
    assert [(int(f["k_total"]), r["row"]) for f, rows in found for r in rows
            if r["n"] == 3_000_000] == [(2048, 10), (2034, 10)] * 2
    assert sum(1 for x in calls if x.startswith("load ")) == len(loaded) == len(kinds_vec) + 1  # once, reused
    # Level print: the sides wait for the ring as at level stats (no synchronisation a side),
    # and each side's print lines go to stderr with its records, in record order: each
    # what format.schema.print_line makes of its record, as the host path prints them.
    printed, pcalls, _c, perr = run_harness(built, tmp_path, "print", pack, level="print")
    pdtoh = [int(x.split()[1]) for x in pcalls if x.startswith("dtoh ")]
    assert pdtoh == [29 * 64, 29 * 8] * 2 and pcalls.count("sync") == 2, pdtoh
    host_printed, _h, _c, host_err = run_harness(built, tmp_path, "print-host", pack, level="print",
                                                 AOTI_DEBUG_FUSED_STATS="0")
    assert printed == host_printed

    tensor_lines = [print_line(r) for r in printed if r["kind"] == "tensor"]
    assert printed_lines(perr) == printed_lines(host_err) and len(tensor_lines) > 40
    assert any(r.get("uninitialised") for r in printed)  # (printed without stats, as Python prints it)
    assert [x for x in printed_lines(perr) if " min=" in x] == tensor_lines


def test_a_side_whose_tensors_stay_put_copies_its_table_once(built, tmp_path):
    """A side's table goes to the device at its first call, and not again while its tensors
    are where they were (kept on the device, as the Python runtime keeps launches); a side
    whose tensor moved copies its table again, to the same place. The records are the host
    path's either way. (In the harness's default mode the misaligned int64 tensor is copied
    on the device, to a new address at each call: its side's table changes.)"""
    pack = fake_pack(tmp_path / "pack.bin")
    for mode, tables in (("steady", []), ("moved", ["htod 2048", "htod 2048"])):
        dev, calls, _c, err = run_harness(built, tmp_path, f"device-{mode}", pack, args=(mode,))
        host, _h, _c, _e = run_harness(built, tmp_path, f"host-{mode}", pack, args=(mode,),
                                       AOTI_DEBUG_FUSED_STATS="0")
        assert "warning" not in err and dev == host
        first = calls[:calls.index("event-record")]  # the first call's sides, until its segment shipped
        second = calls[calls.index("event-record") + 1:]
        assert len(launches(first)) == len(launches(second)) == 2 * 8
        assert [x for x in first if x.startswith("htod ")][-2:] == ["htod 2048", "htod 2048"]
        assert [x for x in second if x.startswith("htod ")] == tables, mode
        # The same launches, each reading its table where the first call left it.
        assert [r for _f, rows in launches(first) for r in rows if r["n"] != 3_000_000] == \
            [r for _f, rows in launches(second) for r in rows if r["n"] != 3_000_000]


#: The strided tensors of the harness's "strided" mode (tests/fake_cuda/harness.cpp), by
#: numel: shape, strides, and the tile width the runtime picks among device_stats.PERM_COLS
#: (negative: the dense kernel's tile).
_STRIDED = {
    2 * 4 * 8 * 16: ((2, 4, 8, 16), (1536, 16, 192, 1), 16),  # k of a fused QKV buffer: gaps
    2 * 3 * 5 * 7: ((2, 3, 5, 7), (105, 1, 21, 3), 4),        # channels_last bfloat16, 3 channels
    2 * 3 * 4 * 8: ((2, 3, 4, 8), (32, 0, 8, 1), 16),         # float16 with a stride-0 dim
    40 * 50: ((40, 50), (1, 40), 64),                          # transposed
    512 * 1024: ((512, 1024), (1, 512), -1024),                # transposed, dense: many programs
    33 * 20: ((33, 20), (1, 33), 64),                          # transposed, 4 bytes off 16
}


def test_strided_tensors_are_read_in_place_as_the_python_runtime_plans_them(built, tmp_path):
    """Gapped, channels_last, expanded and transposed tensors of the floating kinds are read
    in place by the strided kernel (no copy on the device), each launch's table the one
    fused_stats.plan_permuted makes for them (the tile width the best of the pack's for the
    inner run, vectorised where aligned), and the transposed one that fills a dense block
    and whose runs a tile fits by the dense kernel, its table fused_stats.plan_dense's; the
    int64 one, which has no strided kernel, is copied and read as a contiguous tensor;
    records equal the host path's to the bit."""
    pack = fake_pack(tmp_path / "pack.bin")
    dev, calls, _copied, err = run_harness(built, tmp_path, "device", pack, args=("strided",))
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, args=("strided",), AOTI_DEBUG_FUSED_STATS="0")
    assert "warning" not in err, err
    assert dev == host
    assert {tuple(r["stride"]) for r in dev if r["numel"] in _STRIDED} == {v[1] for v in _STRIDED.values()}
    found = launches(calls)
    strided = [(f, rows) for f, rows in found if f["cols"] != "0"]
    dense = [(f, rows) for f, rows in found if f["dense"] != "0"]
    # Per side (4): float32 at widths 16 and 64, bfloat16 at 4, float16 at 16; float32 dense.
    assert sorted((f["kind"], f["cols"]) for f, _ in strided) == sorted(
        [("9", "16"), ("9", "64"), ("7", "4"), ("6", "16")] * 4)
    assert [(f["kind"], f["dense"]) for f, _ in dense] == [("9", "1024")] * 4
    read = [r["n"] for _f, rows in strided + dense for r in rows]
    assert sorted(read) == sorted(list(_STRIDED) * 4)
    for fields, rows in dense:
        width, vec = int(fields["width"]), int(fields["vec"])
        base = (1 << 20) + int(fields["base"])
        ptrs = [base + r["q"] * width * vec for r in rows]
        layouts = [fused_stats._dense_of(fused_stats._perm_layout(*_STRIDED[r["n"]][:2]), fused_stats.BLOCK, width)
                   for r in rows]
        assert all(lay is not None and -lay.block == _STRIDED[r["n"]][2] for lay, r in zip(layouts, rows))
        _b, want_vec, table, programs = fused_stats.plan_dense(
            ptrs, [r["n"] for r in rows], layouts, [r["row"] for r in rows], width, 0,
            fused_stats.PROGRAMS_PER_SM * 132, fused_stats.MIN_TILES)
        assert vec == want_vec == 4 and int(fields["grid"].split(",")[0]) == programs > 100
        assert table == [x for r in rows for x in (r["q"], r["n"], r["first"], r["nprog"], r["per"], r["row"],
                                                   *(r[f"t{j}"] for j in range(6, fused_stats._DENSE_TW)))]
    copied = [r for f, rows in found if f["cols"] == "0" and f["dense"] == "0" for r in rows if r["n"] == 42]
    assert len(copied) == 4 and all(r["mod16"] == 0 for r in copied)  # the int64 6x7, from its aligned copy
    vectorised = {}
    for fields, rows in strided:
        width, vec, cols = int(fields["width"]), int(fields["vec"]), int(fields["cols"])
        base = (1 << 20) + int(fields["base"])
        ptrs = [base + r["q"] * width * vec for r in rows]
        layouts = [fused_stats._perm_layout(*_STRIDED[r["n"]][:2]) for r in rows]
        assert all(_STRIDED[r["n"]][2] == cols for r in rows)
        _b, want_vec, table, programs = fused_stats.plan_permuted(
            ptrs, [r["n"] for r in rows], layouts, [r["row"] for r in rows], width, fused_stats.BLOCK, cols,
            fused_stats.PROGRAMS_PER_SM * 132, fused_stats.MIN_TILES)
        assert vec == want_vec and int(fields["grid"].split(",")[0]) == programs
        assert table == [x for r in rows for x in (r["q"], r["n"], r["first"], r["nprog"], r["per"], r["row"],
                                                   *(r[f"t{j}"] for j in range(6, fused_stats._PERM_TW)))]
        vectorised.update({r["n"]: vec for r in rows})
    # Vectorised but for the bfloat16 tile (4 elements, under a vector of 8) and the group
    # holding the tensor 4 bytes off 16.
    assert {n for n, v in vectorised.items() if v == 1} == {2 * 3 * 5 * 7, 40 * 50, 33 * 20}


def _manifest_order(recs):
    return [r["seq"] for r in recs] == sorted(r["seq"] for r in recs) and len({r["seq"] for r in recs}) == len(recs)


@pytest.mark.parametrize("harness", ["harness", *(f"harness-ring{r}x{n}" for r, n in SMALL_RINGS)])
def test_level_stats_waits_for_no_side_and_keeps_record_order(built, tmp_path, harness):
    """The stream is slow (the stand-in's copies land only when an event recorded after them
    completes, which answers "not ready" three times first; the host would read garbage
    before): records equal the host path's to the bit, in record order with CPU launches
    between the device ones, written by exit, with one copy back per shipped segment's stats and one per its checksums, and no
    stream synchronisation per side; rings smaller than a graph call ship when full, and a
    side larger than a segment waits for its own results."""
    pack = fake_pack(tmp_path / "pack.bin")
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, args=("mixed",), AOTI_DEBUG_FUSED_STATS="0")
    recs, calls, _copied, err = run_harness(built, tmp_path, "slow", pack, args=("mixed",), harness=harness,
                                            FAKE_CU_EVENT_DELAY="3")
    assert "warning" not in err, err
    assert recs == host and _manifest_order(recs)
    assert [r["kernel"] for r in recs].count("cpp_fake_cpu_1") == 4
    records_rows = [r["row"] for _f, rows in launches(calls) for r in rows]
    ships = calls.count("event-record")
    copies = [x for x in calls if x.startswith("dtoh ")]
    if harness == "harness-ring8x2":  # no side fits a segment: each waits for its own results
        assert ships == 0 and len(copies) == 4 and calls.count("sync") >= 4
        return
    assert len(copies) == 2 * ships and calls.count("event-query ready") == ships and "event-query pending" in calls
    if harness == "harness":
        assert ships == 2 and calls.count("sync") == 2
    else:  # a segment per side: shipped when the next side does not fit
        assert ships == 4 and calls.count("sync") == 2 and max(records_rows) < 14


@pytest.mark.parametrize("harness,level", [("harness", "stats"), ("harness", "print"),
                                           *((f"harness-ring{r}x{n}", "stats") for r, n in SMALL_RINGS)])
def test_linked_inputs_take_their_producers_stats_across_segments(built, tmp_path, harness, level):
    """A chain of launches, each reading its predecessor's output (records.h's links), three
    calls with new values each, on a slow stream: the linked inputs take the stats their
    producer's after record got in this call, at stats its ring row (in small rings, a row
    of an earlier segment than the side's own, held until the side is written, or the only
    segment, which the side then cannot refill), and the records are those of the same
    chain with no links and of the host path, but for ``reused``, in record order."""
    pack = fake_pack(tmp_path / "pack.bin")
    plain, _c, _b, _e = run_harness(built, tmp_path, "plain", pack, level=level, args=("chain-unlinked",),
                                    harness=harness, FAKE_CU_EVENT_DELAY="3")
    host, _c, _b, _e = run_harness(built, tmp_path, "host", pack, level=level, args=("chain",),
                                   AOTI_DEBUG_FUSED_STATS="0")
    recs, calls, _copied, err = run_harness(built, tmp_path, "linked", pack, level=level, args=("chain",),
                                            harness=harness, FAKE_CU_EVENT_DELAY="3")
    assert "warning" not in err, err
    taken = [r for r in recs if "reused" in r]
    # Launches 1-5 of each call take input x from the launch before: 15 records.
    assert [(r["kernel_call"], r["arg"], r["reused"]) for r in taken] == \
        [(c, "x", s - 1) for c in range(3) for s in range(1, 6)], taken
    assert all(r["checksum"] and r["stats"] for r in taken)
    assert [{k: v for k, v in r.items() if k != "reused"} for r in recs] == plain and _manifest_order(recs)
    assert host == recs
    assert len({r["checksum"] for r in recs if r["arg"] == "y"}) == 18  # new values at every launch of every call
    if level == "stats":  # a taken input is no row of a stats kernel
        rows = sum(len(rows) for _f, rows in launches(calls))
        assert rows == 3 * (6 * 3 - 5), rows


@pytest.mark.parametrize("variant", ["chain-inputs", "chain-waits-inputs", "chain-waits-inputs-strided"])
@pytest.mark.parametrize("harness", ["harness", *(f"harness-ring{r}x{n}" for r, n in SMALL_RINGS)])
def test_weights_read_once_a_call_are_taken_by_every_launch_of_the_call(built, tmp_path, harness, variant):
    """A ``graph_inputs`` site reads the weight once a call, before the first launch
    (codegen's ``Inputs``), and every launch's weight links to it, as its input links to
    the launch before. The graph inputs' side starts the call's ring segment: in the
    default ring every launch of every call takes both, 8 stats rows a call instead of 13
    (when that side's rows went in the previous call's segment, each launch from the
    second call on read its weight again: a side takes rows of one earlier segment only).
    In any ring the records are the host path's, but for ``reused``; -strided: the weight
    is a transposed view, read in place by the strided kernel."""
    pack = fake_pack(tmp_path / "pack.bin")
    recs, calls, _c, err = run_harness(built, tmp_path, "linked", pack, args=(variant,), harness=harness,
                                       FAKE_CU_EVENT_DELAY="3")
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, args=(variant,), AOTI_DEBUG_FUSED_STATS="0")
    assert "warning" not in err, err

    def without_reused(rs):
        return [{k: v for k, v in r.items() if k != "reused"} for r in rs]

    assert without_reused(recs) == without_reused(host) and _manifest_order(recs)
    weights = [r for r in recs if r["arg"] == "w" and r["kernel"] != "graph_inputs"]
    assert len(weights) == 3 * 6 and len({r["checksum"] for r in weights}) == 1
    if harness == "harness":
        assert recs == host
        assert [r.get("reused") for r in weights] == [6] * 18, \
            [(r["kernel_call"], r["kernel"], r.get("reused")) for r in weights]
        assert sum(len(rows) for _f, rows in launches(calls)) == 3 * 8


@pytest.mark.parametrize("harness,level", [("harness", "stats"), ("harness", "print"),
                                           *((f"harness-ring{r}x{n}", "stats") for r, n in SMALL_RINGS)])
def test_sides_that_wait_go_as_one_launch_and_equal_a_launch_each(built, tmp_path, harness, level):
    """A wrapper that calls pending() (Site::defers): at levels stats and print its sides'
    stats launches wait and go as one where it says (entry_pending), at the call's end
    (entry_call_end) or before their segment is shipped. The linked chain's records (and
    at print its lines) equal those of a launch a side and of the host path, in record
    order; with the default ring a graph call is one stats launch (13 rows: 6 weights, the
    input, 6 outputs) instead of 12; in rings smaller than a call the waiting sides go
    before each segment is shipped."""
    pack = fake_pack(tmp_path / "pack.bin")
    each, each_calls, _c, each_err = run_harness(built, tmp_path, "each", pack, level=level, args=("chain",),
                                                 harness=harness, FAKE_CU_EVENT_DELAY="3")
    host, _h, _c, host_err = run_harness(built, tmp_path, "host", pack, level=level, args=("chain",),
                                         AOTI_DEBUG_FUSED_STATS="0")
    recs, calls, _c, err = run_harness(built, tmp_path, "waits", pack, level=level, args=("chain-waits",),
                                       harness=harness, FAKE_CU_EVENT_DELAY="3")
    assert "warning" not in err, err
    assert recs == each == host and _manifest_order(recs)
    if level == "print":
        printed = printed_lines(err)
        assert len(printed) == len(recs) and printed == printed_lines(each_err) == printed_lines(host_err)
        assert [x for x in printed if " min=" in x] == [print_line(r) for r in recs if r["kind"] == "tensor"]
    merged, single = launches(calls), launches(each_calls)
    assert sum(len(rows) for _f, rows in merged) == sum(len(rows) for _f, rows in single) == 3 * 13
    if harness == "harness":
        assert len(single) == 3 * 12 and len(merged) == 3, [f for f, _r in merged]
        assert all(len(rows) == 13 for _f, rows in merged)
    elif harness != "harness-ring8x2":
        assert len(merged) < len(single), (len(merged), len(single))
    # a run's launch precedes its segment's copy back: no row is read before it is written
    ships = [i for i, x in enumerate(calls) if x.startswith("dtoh ")]
    assert ships and all(any(x.startswith("launch ") for x in calls[:i]) for i in ships)


@pytest.mark.parametrize("variant, equal", [("chain-waits-overwrite", True),
                                            ("chain-waits-overwrite-unguarded", False)])
def test_a_pending_call_launches_what_waits_before_a_launch_overwrites_it(built, tmp_path, variant, equal):
    """Launch 3 of each call writes the weight its before side (and the sides before it)
    read. With entry_pending before it, as codegen writes one there, the waiting sides
    read the weight before it changes: records equal those of a launch a side. Without,
    the merged launch reads the new weight: the records differ (what the pending line is for)."""
    pack = fake_pack(tmp_path / "pack.bin")
    each, _calls, _c, _e = run_harness(built, tmp_path, "each", pack, args=("chain-overwrite",))
    recs, calls, _c, err = run_harness(built, tmp_path, "waits", pack, args=(variant,))
    assert "warning" not in err, err
    weights = [(r["kernel_call"], r["checksum"]) for r in recs if r["arg"] == "w"]
    if equal:  # the weight as each call starts (the same values), and as launch 3 of each call leaves it
        assert len({c for _k, c in weights}) == 1 + 3, weights
    assert (recs == each) is equal
    # a call's sides in two launches (before launch 3 writes, and at the call's end); unguarded in one
    assert len(launches(calls)) == 3 * (2 if equal else 1)


def test_a_cuda_error_at_a_shipped_segment_is_named_and_its_records_say_so(built, tmp_path):
    """The event of a shipped segment reports the fault: one warning naming the launch after
    which its kernels were queued, the records of every side queued until then without
    stats and with the error, and the host path for every later side."""
    pack = fake_pack(tmp_path / "pack.bin")
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, AOTI_DEBUG_FUSED_STATS="0")
    recs, calls, _copied, err = run_harness(built, tmp_path, "event", pack, FAKE_CU_FAIL="event")
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1, warnings
    assert ("CUDA error while computing stats on the device after triton_fake_kernel_0 (cuEventQuery: "
            "CUDA_ERROR_ILLEGAL_ADDRESS") in warnings[0]
    assert len(recs) == len(host) and _manifest_order(recs)
    lost = [r for r in recs if "error" in r]
    assert lost and all(r["stats"] is None and r["checksum"] is None and "cuEventQuery" in r["error"] for r in lost)
    # The first call's segment fails when it is first polled, as the second call's before
    # side starts (its rows already queued); from the after side on, the host path.
    assert {(r["launch"], r["phase"]) for r in lost} == {(1, "before"), (1, "after"), (2, "before")}
    assert [r for r in recs if r["launch"] == 2 and r["phase"] == "after"] == \
        [r for r in host if r["launch"] == 2 and r["phase"] == "after"]
    for got, want in zip(recs, host):
        if "error" in got:
            assert {k: v for k, v in got.items() if k not in ("stats", "checksum", "error")} == \
                {k: v for k, v in want.items() if k not in ("stats", "checksum")}


def test_print_lines_and_linked_packs_match_the_host_path(built, tmp_path, capfd):
    pack = fake_pack(tmp_path / "pack.bin")
    dev, calls, _c, err_dev = run_harness(built, tmp_path, "linked", pack, mode="linked", level="print")
    host, _h, _c2, err_host = run_harness(built, tmp_path, "host", pack, level="print", AOTI_DEBUG_FUSED_STATS="0")
    assert dev == host and launches(calls)
    lines = [x for x in err_dev.splitlines() if " min=" in x]
    assert lines and lines == [x for x in err_host.splitlines() if " min=" in x]


def test_save_copies_the_values_and_launches_nothing(built, tmp_path):
    pack = fake_pack(tmp_path / "pack.bin")
    recs, calls, copied, _ = run_harness(built, tmp_path, "save", pack, level="save")
    assert not launches(calls) and copied > 0 and any(r.get("file") for r in recs)


@pytest.mark.parametrize("case", ["launch", "sync", "capture-query", "load", "arch", "bad-file", "nostream",
                                  "capturing", "no-context"])
def test_every_failure_falls_back_to_the_host_path(built, tmp_path, case):
    pack = fake_pack(tmp_path / "pack.bin")
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, AOTI_DEBUG_FUSED_STATS="0")
    env, mode = {}, "file"
    if case in ("launch", "sync", "capture-query", "load"):
        env["FAKE_CU_FAIL"] = case
    elif case == "arch":
        env["FAKE_CU_CC"] = "80"
    elif case == "capturing":
        env["FAKE_CU_CAPTURING"] = "1"
    elif case == "no-context":
        env["FAKE_CU_NO_CTX"] = "1"
    elif case == "nostream":
        mode = "nostream"
    if case == "bad-file":
        pack = str(tmp_path / "missing.bin")
    recs, calls, copied, err = run_harness(built, tmp_path, case, pack, mode=mode, **env)
    assert recs == host  # the records are whole: the host path took over
    assert copied > 0
    warnings = [x for x in err.splitlines() if "warning" in x]
    expected = {
        "launch": "CUDA error while computing stats on the device after triton_fake_kernel_0 (cuLaunchKernel: "
                  "CUDA_ERROR_ILLEGAL_ADDRESS",
        "sync": "(cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS",
        # After a fault the first driver call of the side fails (its sticky error): named, not
        # a silent host path (found on the H100: the host copy's error did not name the cause).
        "capture-query": "after triton_fake_kernel_0 (cuStreamIsCapturing: CUDA_ERROR_ILLEGAL_ADDRESS",
        # ...or the lazy load of a kernel (cuModuleLoadData): the same error, not "cannot load".
        "load": "after triton_fake_kernel_0 (cuModuleLoadData: CUDA_ERROR_ILLEGAL_ADDRESS",
        "arch": "the stats kernels were compiled for sm_90, cuda:0 is sm_80",
        "bad-file": "cannot open " + pack,
    }.get(case)
    if expected is None:
        assert not warnings and not launches(calls), (warnings, calls[:5])
    else:
        assert len(warnings) == 1 and expected in warnings[0], warnings
        assert len(launches(calls)) <= 1  # the first failure turns the path off


def test_the_device_trace_names_each_driver_call(built, tmp_path):
    """AOTI_DEBUG_TRACE_DEVICE=1: every step on stderr (where a hang stopped), and the
    stream polled (cuStreamQuery) before its synchronisation, records unchanged."""
    pack = fake_pack(tmp_path / "pack.bin")
    host, _h, _c, _e = run_harness(built, tmp_path, "host", pack, AOTI_DEBUG_FUSED_STATS="0")
    recs, calls, _copied, err = run_harness(built, tmp_path, "traced", pack, AOTI_DEBUG_TRACE_DEVICE="1")
    assert recs == host
    lines = [x for x in err.splitlines() if x.startswith("[aoti_debug device] ")]
    kernels = len(device_stats.read_pack(open(pack, "rb").read())["kernels"])
    for step in ("loading libcuda.so.1", "driver ready", f"pack {pack}: {kernels} kernels for sm_90", "sm_90, 132 SMs",
                 "load kernel", "cuMemAlloc", "launch kernel", "wait for stream",
                 "stream done after"):
        assert any(step in x for x in lines), (step, lines[:20])
    assert any(re.search(r"loaded kernel \d+: ok$", x) for x in lines)
    assert not any("warning" in x for x in err.splitlines())
    syncs = [i for i, x in enumerate(calls) if x == "sync"]
    assert syncs and all(calls[i - 1] == "query" for i in syncs)
    quiet, _calls, _c2, err2 = run_harness(built, tmp_path, "quiet", pack)
    assert quiet == host and "[aoti_debug device]" not in err2


def test_cpp_step_reads_the_launches_of_the_device_trace(built, tmp_path):
    """benchmarks/cpp_step.py --launches parses the runtime's trace lines: one per stats
    launch the stand-in driver logged, each with its tensors and the pack kernel's form
    (the strided harness variant: contiguous and strided kernels)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cpp_step", os.path.join(REPO, "benchmarks", "cpp_step.py"))
    cpp_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpp_step)
    pack = fake_pack(tmp_path / "pack.bin")
    kernels = device_stats.read_pack(open(pack, "rb").read())["kernels"]
    _recs, calls, _copied, err = run_harness(built, tmp_path, "traced", pack, args=("strided",),
                                             AOTI_DEBUG_TRACE_DEVICE="1")
    found = [m for m in map(cpp_step._LAUNCH.search, err.splitlines()) if m]
    logged = launches(calls)
    assert len(found) == len(logged) > 0
    assert [int(m.group(4)) for m in found] == [len(rows) for _f, rows in logged]
    forms = {cpp_step._form(kernels[int(m.group(1))]) for m in found}
    assert any(f.startswith("strided, tile width ") for f in forms), forms
    assert any(f.startswith("contiguous") for f in forms), forms


def test_the_flight_trigger_saves_device_tensors_after_a_synchronisation(built, tmp_path):
    """With the flight recorder (native/flight.h), stats on the device copy nothing and wait
    for the current stream only: the tensors the nonfinite trigger saves are read after a
    device synchronisation (run_harness checks that no copy came before one), and hold the
    values the records' stats describe."""
    pack = fake_pack(tmp_path / "pack.bin", leave_out=())
    recs, calls, _copied, err = run_harness(built, tmp_path, "trigger", pack, args=("finite-inputs",),
                                            AOTI_DEBUG_RING="2", AOTI_DEBUG_TRIGGER="nonfinite")
    assert launches(calls) and "warning" not in err, err[-3000:]
    with open(os.path.join(only_run(str(tmp_path / "trigger")), "run.json")) as fh:
        fired = json.load(fh)["flight"]["fired"]
    assert fired["value"] == "nan" and fired["kernel_call"] == 0 and fired["saved"], fired
    saved = [r for r in recs if r.get("file") in fired["saved"]]
    assert {r["phase"] for r in saved} == {"before", "after"} and any(r["dtype"] == "float32" for r in saved)
    run = only_run(str(tmp_path / "trigger"))
    for r in saved:
        t = torch.load(os.path.join(run, r["file"]), weights_only=True)
        assert list(t.shape) == r["shape"] and str(t.dtype) == "torch." + r["dtype"], r
        if t.dtype == torch.float32:
            assert int(t.isnan().sum()) == r["stats"]["nan"] and int(t.isinf().sum()) == r["stats"]["inf"], r


# --------------------------------------------------------------------------- bounded waits of the build
def test_a_held_build_lock_is_a_bounded_wait_that_names_its_holder(tmp_path):
    from aoti_debug.codegen import native_library

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from aoti_debug.codegen import native_library as n; import time\n"
         "with n.build_lock(sys.argv[2]):\n    print('held', flush=True); time.sleep(60)", REPO, str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        told = []
        t0 = time.monotonic()
        with pytest.raises(native_library.BuildError, match=rf"held by another build \(pid {holder.pid}\) for 0.5 s"):
            with native_library.build_lock(str(tmp_path), timeout=0.5, trace=told.append):
                pass
        assert time.monotonic() - t0 < 5 and told and str(holder.pid) in told[0]
    finally:
        holder.kill()
        holder.wait()
    with native_library.build_lock(str(tmp_path), timeout=5):  # free again once its holder is gone
        assert open(tmp_path / "build.lock").read().strip() == str(os.getpid())


def test_workers_past_the_timeout_are_killed_and_the_build_is_a_warning(tmp_path, monkeypatch, caplog):
    """Workers that do not finish in WORKERS_TIMEOUT_S: killed, named, and no compile in
    this process after them (what stopped them could stop it too)."""
    chosen = [v for v in device_stats.variants() if (v.kind, v.vec) == (9, 4)]
    monkeypatch.setattr(device_stats, "WORKERS_TIMEOUT_S", 0.2)  # less than a worker takes to import Triton
    t0 = time.monotonic()
    with caplog.at_level("INFO", logger="aoti_debug"), pytest.raises(device_stats.BuildError) as e:
        device_stats.compile_images(90, chosen, workers=1)
    assert time.monotonic() - t0 < 10
    m = re.search(r"did not finish in 0.2 s \(worker 0, pid (\d+)", str(e.value))
    assert m, str(e.value)
    with pytest.raises(ProcessLookupError):
        os.kill(int(m.group(1)), 0)  # killed and reaped
    assert "compiling in this process" not in caplog.text


def test_the_build_trace_shows_its_phases(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(device_stats, "compile_images", fake_stats_images)
    monkeypatch.setattr(device_stats, "pack_key", lambda capability: f"trace{capability:07x}")
    monkeypatch.setenv("AOTI_DEBUG_TRACE_BUILD", "1")
    assert device_stats.pack_path(5) and device_stats.pack_path(5)
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[aoti_debug build ")]
    assert any("lock of" in x and "held" in x for x in err) and any("built pack-sm5.bin" in x for x in err), err
    monkeypatch.setenv("AOTI_DEBUG_TRACE_BUILD", "0")
    device_stats.trace("not shown")
    assert "not shown" not in capsys.readouterr().err


# --------------------------------------------------------------------------- what the compile side emits
def test_jit_and_aoti_blocks_name_the_stats_kernels():
    block = cpp_runtime.library_block("cuda", "/x/lib.so", stats="/cache/stats-0/pack-sm90.bin")
    assert '#define AOTI_DEBUG_STATS_PACK_FILE "/cache/stats-0/pack-sm90.bin"' in block
    assert not re.search(r'^#define AOTI_DEBUG_STATS_PACK_FILE "[^"]', cpp_runtime.library_block("cuda", "/x/lib.so"),
                         re.M)
    name = "stats-0123456789ab/pack-sm90-0123456789ab.o"
    assert device_stats.is_object_name(name) and not device_stats.is_object_name("../" + name)
    assert device_stats.SYMBOL in device_stats._object_source("pack.bin")
    assert device_stats.wanted("cpu", "stats") is None and device_stats.wanted("cuda", "save") is None


def test_the_pack_object_holds_the_pack_as_its_symbol(tmp_path):
    """The AOTI side: the object built from a pack defines the symbol the glue refers to,
    with the pack's bytes, and a program that refers to it weakly links with or without it."""
    pack = fake_pack(tmp_path / "pack.bin")
    shutil.copyfile(pack, tmp_path / "p.bin")
    (tmp_path / "p.s").write_text(device_stats._object_source("p.bin"))
    subprocess.run([CXX, "-c", "p.s", "-o", "p.o"], cwd=tmp_path, check=True)
    (tmp_path / "main.cpp").write_text(
        f'#include <cstdio>\nextern "C" __attribute__((weak)) const unsigned char {device_stats.SYMBOL}[];\n'
        f"int main() {{ if (!{device_stats.SYMBOL}) {{ std::puts(\"none\"); return 0; }}\n"
        f"  std::printf(\"%.8s %p\\n\", reinterpret_cast<const char*>({device_stats.SYMBOL}), "
        f"(const void*){device_stats.SYMBOL}); return 0; }}\n")
    for objects, want in (([str(tmp_path / "p.o")], "AOTIDSTS"), ([], "none")):
        exe = str(tmp_path / ("with" if objects else "without"))
        subprocess.run([CXX, "-fPIC", "-pie", str(tmp_path / "main.cpp"), *objects, "-o", exe], check=True)
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
        assert out.startswith(want), out
        if objects:
            assert int(out.split()[1], 16) % device_stats.IMAGE_ALIGN == 0


def test_pack_and_object_are_built_once_and_linked(tmp_path, monkeypatch, caplog):
    """The compile side's cache: the pack (Triton's compile stood in for) and the object
    holding it, built once; the object goes into AOTInductor's link list with the runtime
    object, and a stats object that cannot be had is a warning, never a failed link."""
    from aoti_debug.codegen import native_object

    calls = []

    def fake_compile(capability, chosen=None, workers=None):
        calls.append(capability)
        return fake_stats_images(capability)

    monkeypatch.setattr(device_stats, "compile_images", fake_compile)
    monkeypatch.setattr(device_stats, "pack_key", lambda capability: f"{capability:012x}")
    pack = device_stats.pack_path(7)
    assert pack and device_stats.read_pack(open(pack, "rb").read())["capability"] == 7
    name = device_stats.object_name(7)
    assert name and device_stats.is_object_name(name) and device_stats.pack_path(7) == pack
    assert device_stats.object_name(7) == name and calls == [7]  # built once
    path = device_stats.object_for_link(name)
    syms = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True).stdout
    assert re.search(rf"OBJECT\s+GLOBAL\s+HIDDEN\s+\S+\s+{device_stats.SYMBOL}$", syms, re.M), syms
    extra = native_object._kernel_objects()
    assert extra is not None
    missing = name.replace("pack-sm7-", "pack-sm8-")
    with caplog.at_level("WARNING", logger="aoti_debug"), native_object.linked([missing, name]):
        linked = [p for p in extra if os.path.basename(p) == os.path.basename(name)]
        assert len(linked) == 1 and open(linked[0], "rb").read() == open(path, "rb").read()
        assert not any(os.path.basename(missing) in p for p in extra)
    assert not any(os.path.basename(name) in p for p in extra)  # removed after the compile
    assert "are not linked" in caplog.text
