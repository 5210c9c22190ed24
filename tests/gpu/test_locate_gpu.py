"""``aoti-debug locate`` on CUDA: an illegal memory access in a user-defined Triton kernel and
in an Inductor kernel fed an out-of-range index, through the Python wrapper, cpp_wrapper
and AOTInductor. Run with tools/gpu/run_gpu_tests.py (-k locate).

Each test runs one reproduction from examples/ under ``locate`` in a fresh process (a
device fault poisons the CUDA context of the process it happens in). C++ paths skip,
saying why, when the run printed no names lines (no C++ instrumentation, or the AOTI
package does not load on the machine).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from aoti_debug.locate import locate

from tests.conftest import REPO

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TIMEOUT = 300
_DEVICE_FAULT = ("illegal memory access", "illegal address", "device-side assert", "unspecified launch failure")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _locate(example: str, wrapper: str, *extra: str):
    cmd = [sys.executable, os.path.join(REPO, "examples", example), "--wrapper", wrapper, *extra]
    v = locate(cmd, timeout=TIMEOUT, env=_env(), echo=lambda line: print(line, file=sys.stderr))
    print(v.render())  # kept in the log of a failing test
    if wrapper != "python" and v.started == 0:
        pytest.skip(f"{wrapper}: the run printed no names lines (C++ instrumentation or AOTI load "
                    f"unavailable here): {v.error}")
    return v


def _assert_device_fault(v) -> None:
    assert v.status == "located" and v.exit_code == 1, v.render()
    assert v.kind in ("device-error", "signal", "exception"), v.render()
    # The device's words, unless the process was killed before it could print them.
    assert v.signal or any(s in (v.error or "").lower() for s in _DEVICE_FAULT), v.render()


@pytest.mark.parametrize("wrapper", ["python", "cpp", "aoti"])
def test_locate_user_triton_oob_store(wrapper):
    v = _locate("locate_ima_user_triton.py", wrapper)
    _assert_device_fault(v)
    assert v.kernel.startswith("oob_store_kernel"), v.render()
    assert v.completed >= 1, v.render()  # the Inductor kernel before it (sin + 1) completed
    src = v.source
    if wrapper == "python" or v.wrapper == "cpp":  # the runtime (or a traceback) named the file
        assert src is not None and src.file and src.line and "oob_store_kernel" in (src.code or ""), v.render()
    if wrapper == "python":
        assert src.user_function and "oob_store_kernel" in src.user_function, v.render()
        if src.user_source:  # Inductor's "# Original path:" comment
            assert "locate_ima_user_triton.py" in src.user_source, v.render()
    if wrapper == "python":
        tensors = [a for a in v.launch.args if a.get("kind") == "tensor"]
        assert all(a["device"].startswith("cuda") for a in tensors), tensors
        assert sorted(a["shape"] for a in tensors) == [[1], [1024], [1024]], tensors  # shift, y, out
        assert {a["role"] for a in tensors} >= {"input"}, v.launch.args


@pytest.mark.parametrize("wrapper", ["python", "cpp", "aoti"])
def test_locate_inductor_kernel_out_of_range_index(wrapper):
    v = _locate("locate_ima_indexing.py", wrapper)
    _assert_device_fault(v)
    assert v.kernel.startswith("triton_"), v.render()
    fused = " ".join([v.kernel, *(v.source.aten if v.source else [])])
    assert "index" in fused, v.render()
    if wrapper == "python":
        assert v.source.file.endswith(".py") and v.kernel in (v.source.code or ""), v.render()
        assert v.source.kernel_file or v.source.definition, v.render()
    if wrapper == "python":
        shapes = [a.get("shape") for a in v.launch.args if a.get("kind") == "tensor"]
        assert [16] in shapes, v.launch.args  # the index tensor
        idx = [a for a in v.launch.args if a.get("kind") == "tensor" and a.get("shape") == [16]]
        assert "int64" in {a["dtype"] for a in idx}, idx  # the index tensor among the [16] args


def test_locate_indexing_with_device_asserts_names_the_same_kernel():
    v = _locate("locate_ima_indexing.py", "python", "--asserts")
    _assert_device_fault(v)
    assert v.kernel.startswith("triton_") and "index" in " ".join([v.kernel, *v.source.aten]), v.render()


def test_locate_clean_gpu_run_exits_0():
    v = _locate("locate_ima_user_triton.py", "python", "--no-fault")
    assert v.status == "clean" and v.exit_code == 0 and v.completed >= 3, v.render()


@pytest.mark.skipif(not any(os.access(os.path.join(d, "compute-sanitizer"), os.X_OK)
                            for d in os.environ.get("PATH", "").split(os.pathsep) if d),
                    reason="compute-sanitizer is not on the PATH")
def test_locate_sanitizer_report_is_attached():
    cmd = [sys.executable, os.path.join(REPO, "examples", "locate_ima_user_triton.py")]
    v = locate(cmd, timeout=TIMEOUT, env=_env(), use_sanitizer=True)
    print(v.render())
    assert v.kernel.startswith("oob_store_kernel") and v.sanitizer is not None, v.render()
    assert v.sanitizer.report, v.sanitizer.note
    assert "oob_store_kernel" in " ".join(v.sanitizer.report), v.sanitizer.report
