"""``aoti-debug doctor``: versions, the C++ compiler (and its libstdc++), the patch table,
and exit 2 when aoti_debug cannot work here."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import torch
from click.testing import CliRunner

from aoti_debug.cli import main
from aoti_debug.codegen import doctor, toolchain
from tests.conftest import REPO


def _fake_compiler(tmp_path, libstdcxx: str, name: str = "fakecxx") -> str:
    """A compiler script that answers --version and -print-file-name like GCC does."""
    path = tmp_path / name
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --version) echo "fakecxx (GCC) 99.1.0";;\n'
        f'  -print-file-name=*) echo "{libstdcxx}";;\n'
        "  *) exit 1;;\n"
        "esac\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def test_doctor_table_names_versions_compiler_and_hooks():
    res = CliRunner().invoke(main, ["doctor"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert f"torch         {torch.__version__}" in out
    assert "C++ compiler" in out and "libstdc++   shared: /" in out
    assert "codegen.wrapper.PythonWrapperCodegen" in out and "generate_kernel_call" in out
    assert "generate_extern_kernel_multi_out" in out and "UserDefinedTritonKernel" in out
    assert "OK: every required Inductor hook is present" in out


def test_doctor_json_parses():
    res = CliRunner().invoke(main, ["doctor", "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] is True and data["exit_code"] == 0 and data["problems"] == []
    assert data["versions"]["torch"] == torch.__version__ and data["versions"]["torch"].startswith("2.13")
    assert data["compiler"]["version"] and data["compiler"]["static_libstdcxx"] is False
    entries = data["patches"]["entries"]
    assert {e["status"] for e in entries} <= {"ready", "inherited"}
    kernel_call = [e for e in entries if e["attr"] == "generate_kernel_call"]
    assert kernel_call[0]["owner"] == "torch._inductor.codegen.wrapper:PythonWrapperCodegen"
    assert kernel_call[0]["required"] is True and "Triton" in kernel_call[0]["reason"]


def test_static_libstdcxx_compiler_is_reported_with_the_fix(tmp_path, monkeypatch):
    fake = _fake_compiler(tmp_path, "libstdc++.so")  # a bare name: only libstdc++.a exists
    (tmp_path / "bin").mkdir()
    good = _fake_compiler(tmp_path / "bin", "/lib/libstdc++.so", name="g++")  # found on PATH, shared
    monkeypatch.setenv("PATH", os.path.dirname(good) + os.pathsep + os.environ.get("PATH", ""))
    assert toolchain.links_libstdcxx_statically(fake)
    assert not toolchain.links_libstdcxx_statically(good)
    res = CliRunner().invoke(main, ["doctor", "--cxx", fake, "--format", "json"])
    assert res.exit_code == 0, res.output  # a warning: torch.compile still works
    data = json.loads(res.output)
    assert data["compiler"]["static_libstdcxx"] is True and data["compiler"]["libstdcxx"] == "libstdc++.so"
    assert data["compiler"]["suggestion"] == good
    assert f"set CXX={good}" in data["compiler"]["fix"] and "crash on load" in data["compiler"]["fix"]
    table = CliRunner().invoke(main, ["doctor", "--cxx", fake]).output
    assert "STATIC (no libstdc++.so)" in table and f"WARNING: {fake} finds no libstdc++.so" in table
    assert f"set CXX={good}" in table


def test_cxx_is_honoured_as_inductor_does(tmp_path):
    """In a fresh process, CXX picks the compiler (Inductor reads it into config.cpp.cxx)."""
    fake = _fake_compiler(tmp_path, "libstdc++.so")
    r = subprocess.run([sys.executable, "-m", "aoti_debug.cli", "doctor", "--format", "json"],
                       env=dict(os.environ, CXX=fake, PYTHONPATH=REPO), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["compiler"]
    assert c["name"] == fake and c["origin"] == "CXX" and c["static_libstdcxx"] is True


def test_no_compiler_exits_2(tmp_path):
    res = CliRunner().invoke(main, ["doctor", "--cxx", str(tmp_path / "no-such-cxx")])
    assert res.exit_code == 2, res.output
    assert "PROBLEM: no C++ compiler found" in res.output
    assert "cpp_wrapper=True, AOTInductor and Inductor's C++ CPU kernels cannot be compiled" in res.output


def test_missing_required_hook_exits_2(monkeypatch):
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    monkeypatch.delattr(PythonWrapperCodegen, "define_kernel")
    res = CliRunner().invoke(main, ["doctor"])
    assert res.exit_code == 2, res.output
    assert "missing    required  define_kernel" in res.output
    assert "PROBLEM: required Inductor hooks missing" in res.output and "UnsupportedTorchError" in res.output
    data = json.loads(CliRunner().invoke(main, ["doctor", "-f", "json"]).output)
    assert data["exit_code"] == 2
    assert "torch._inductor.codegen.wrapper.PythonWrapperCodegen.define_kernel" in data["problems"][0]


def test_report_is_a_result_object():
    report = doctor.doctor()
    assert report and report.exit_code == 0 and str(report).startswith("aoti-debug doctor: OK")
