"""Switching on/off: env vars with no code change, `aoti-debug run`, the Python API, and
caches never handing back an artifact compiled under other instrumentation."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug import config
from aoti_debug.cli import main
from aoti_debug.errors import ConfigError
from examples.models import MLP
from tests.conftest import REPO, only_run, records, run_python

# A user script that knows nothing about aoti_debug.
SCRIPT = textwrap.dedent(
    """
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    with torch.no_grad():
        out = torch.compile(m)(torch.randn(2, 8))
    print("OK", tuple(out.shape))
    """
)


def _env(tmp, **extra):
    # Caches on (the default), shared by the processes of one test.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor_cache"), "PYTHONPATH": REPO,
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    env.update(extra)
    return env


def test_env_var_instruments_with_no_code_change(tmp_path):
    r = run_python(SCRIPT, _env(tmp_path, AOTI_DEBUG_LEVEL="save", AOTI_DEBUG_DIR=str(tmp_path / "d")))
    assert r.returncode == 0, r.stderr
    assert "OK (2, 8)" in r.stdout
    assert records(only_run(str(tmp_path / "d")))


def test_torch_fallback_env_var_is_honoured(tmp_path):
    r = run_python(SCRIPT, _env(tmp_path, AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER="3"))
    assert r.returncode == 0, r.stderr
    assert "[aoti_debug] before launch=1 " in r.stderr


def test_bad_env_value_warns_and_model_runs(tmp_path):
    r = run_python(SCRIPT, _env(tmp_path, AOTI_DEBUG_LEVEL="loud"))
    assert r.returncode == 0, r.stderr
    assert "unknown aoti_debug level 'loud'" in r.stderr and "Traceback" not in r.stderr


def test_unset_env_costs_no_import(tmp_path):
    r = run_python("import torch, sys; print('aoti_debug' in sys.modules, 'aoti_debug._switch' in sys.modules)",
                   _env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_fx_and_aot_caches_do_not_cross_instrumentation(tmp_path):
    """off -> save -> off -> stats, caches on, fresh process each time, one cache dir."""
    off = run_python(SCRIPT, _env(tmp_path))
    assert off.returncode == 0, off.stderr
    on = run_python(SCRIPT, _env(tmp_path, AOTI_DEBUG_LEVEL="save", AOTI_DEBUG_DIR=str(tmp_path / "a")))
    assert on.returncode == 0, on.stderr
    assert records(only_run(str(tmp_path / "a"))), "a cached uninstrumented artifact was reused"
    off2 = run_python(SCRIPT + "\nimport glob;print('CODE', glob.glob('aoti_debug_dump'))", _env(tmp_path),
                      cwd=str(tmp_path))
    assert off2.returncode == 0 and "CODE []" in off2.stdout, off2.stdout + off2.stderr
    stats = run_python(SCRIPT, _env(tmp_path, AOTI_DEBUG_LEVEL="stats", AOTI_DEBUG_DIR=str(tmp_path / "s")))
    assert stats.returncode == 0, stats.stderr
    recs = records(only_run(str(tmp_path / "s")))
    assert recs and not any("file" in r for r in recs), "a save-level artifact was reused for stats"


def test_in_process_toggle_recompiles(tmp_path):
    model = MLP().eval()
    x = torch.randn(2, 16)
    torch._dynamo.reset()
    fn = torch.compile(model)
    with torch.no_grad():
        fn(x)                                  # compiled without instrumentation
        with aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "on")):
            fn(x)                              # must not reuse the uninstrumented frame
        aoti_debug.flush()
        fn(x)                                  # off again: no new records
    aoti_debug.flush()
    recs = records(only_run(str(tmp_path / "on")))
    assert recs
    assert len(records(only_run(str(tmp_path / "on")))) == len(recs)
    assert aoti_debug._switch.current() == config.CompileSettings()


def test_enable_disable_idempotent_and_reversible():
    from aoti_debug.codegen import inductor
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    original = PythonWrapperCodegen.generate_kernel_call
    aoti_debug.enable(level="stats")
    aoti_debug.enable(level="stats")
    assert PythonWrapperCodegen.generate_kernel_call is not original
    assert "aoti_debug:stats" in torch.compiler.config.cache_key_tag
    aoti_debug.disable()
    aoti_debug.disable()
    assert PythonWrapperCodegen.generate_kernel_call is original
    assert not inductor.installed()
    assert "aoti_debug" not in torch.compiler.config.cache_key_tag


def test_user_cache_tag_is_kept():
    torch.compiler.config.cache_key_tag = "mine"
    try:
        with aoti_debug.enabled(level="names"):
            assert torch.compiler.config.cache_key_tag.startswith("mine|aoti_debug:names")
        assert torch.compiler.config.cache_key_tag == "mine"
    finally:
        torch.compiler.config.cache_key_tag = ""


def test_cli_run(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(SCRIPT)
    runner = CliRunner()
    res = runner.invoke(main, ["run", "--level", "stats", "--kernels", "extern*", "--dir", str(tmp_path / "d"),
                               "--", sys.executable, str(script)])
    assert res.exit_code == 0, res.output
    recs = records(only_run(str(tmp_path / "d")))
    assert recs and all(r["kernel"].startswith("extern_kernels") for r in recs)


def test_cli_run_bad_level_is_one_line_usage_error():
    res = CliRunner().invoke(main, ["run", "--level", "loud", "--", "true"])
    assert res.exit_code == 2
    assert "unknown aoti_debug level 'loud'" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("value,expected", [("0", "off"), ("1", "save"), ("print", "print"), ("3", "names"),
                                            ("STATS", "stats"), ("", "off")])
def test_parse_level(value, expected):
    assert config.parse_level(value) == expected


def test_kernel_filter_globs_and_excludes():
    f = config.KernelFilter.parse("triton_*,!*softmax*")
    assert f.matches("triton_poi_fused_add_0")
    assert not f.matches("triton_red_fused_softmax_1")
    assert not f.matches("cpp_fused_add_0")
    assert config.KernelFilter.parse("!extern*").matches("cpp_fused_x", "cpp_fused_x")
    assert config.KernelFilter.parse("aten.mm").matches("extern_kernels.mm", "aten.mm")


def test_bad_phases_and_bytes():
    with pytest.raises(ConfigError):
        config.parse_phases("during")
    with pytest.raises(ConfigError):
        config.run_settings_from_env({"AOTI_DEBUG_MAX_BYTES": "lots"})


def test_the_cache_tag_changes_with_the_cpp_runtime_sources(tmp_path):
    """A cached wrapper names the runtime library built from the sources it was compiled
    with: a changed C++ runtime part must not reuse it."""
    import shutil

    from aoti_debug.codegen import cache_tag

    package = os.path.dirname(os.path.abspath(aoti_debug.__file__))
    copy = tmp_path / "aoti_debug"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache_tag.fingerprint(str(copy))
    assert before == cache_tag.code_fingerprint()
    for part in ("stats.h", "library.cpp"):
        path = copy / "codegen" / "native" / part
        path.write_text(path.read_text() + "\n// changed\n")
        after = cache_tag.fingerprint(str(copy))
        assert after != before, part
        before = after
