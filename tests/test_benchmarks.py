"""benchmarks/overhead.py runs end to end on CPU and its table holds what it claims:
the rows asked for, numeric ratios, and records written at level stats.

Each row compiles a model in its own process (a ResNet-18 compile alone takes 20-30 s on
a 2-core machine), so the two runs take minutes: marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, fake_stats_images

def overhead(*args: str, json_path: str | None = None) -> dict[tuple[str, str, str], dict[str, str]]:
    """Run the benchmark (tiny preset, 2 steps, markdown); its table rows by (wrapper, mode, config)."""
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "overhead.py"), "--device", "cpu", "--preset", "tiny",
           "--steps", "2", "--format", "markdown", *args, *(["--json", json_path] if json_path else [])]
    # As a user starts it: nothing earlier tests left in this process's environment
    # (aoti_debug's switches, Inductor's and Triton's cache directories set in-process).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AOTI_DEBUG_", "TORCHINDUCTOR_", "TRITON_", "AOT_INDUCTOR_"))}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env=dict(env, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Command: `") and "benchmarks/overhead.py" in lines[0], proc.stdout
    assert "torch " in proc.stdout and "CPU" in proc.stdout
    table = [line for line in lines if line.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in table[1:]]
    return {(r["wrapper"], r["mode"], r["config"]): r for r in rows}


def check(rows: dict, wrapper: str, model: str) -> None:
    assert set(rows) == {(wrapper, "default", "base"), (wrapper, "default", "ours 4 stats")}, rows
    base, stats = rows[wrapper, "default", "base"], rows[wrapper, "default", "ours 4 stats"]
    for r in (base, stats):
        assert r["model"].startswith(model), r
        assert float(r["ms/step"]) > 0 and float(r["compile s"]) > 0, r
        assert "failed" not in r["notes"], r
    assert float(base["x base"]) == 1.0 and float(base["compile x base"]) == 1.0
    assert float(stats["x base"]) > 0 and float(stats["compile x base"]) > 0
    assert float(base["steady x base"]) == 1.0 and float(stats["steady x base"]) > 0
    assert base["records/step"] == "-" and float(stats["records/step"]) > 0, stats
    assert float(stats["MB/step"]) > 0, stats
    assert "built its own runtime" not in stats["notes"], stats  # the prebuilt runtime was found


@pytest.mark.slow
def test_resnet18_python_wrapper(tmp_path):
    saved = str(tmp_path / "run.json")
    rows = overhead("--model", "resnet18", "--wrapper", "python", "--only", "ours 4 stats", json_path=saved)
    check(rows, "python", "resnet18 (")
    # The saved run: the table's rows, as the README's table reads them.
    doc = _load("saved_runs").read(saved)
    assert doc["tool"] == "overhead.py" and "--json" in doc["command"] and doc["machine"].startswith("CPU")
    by_level = {r["level"]: r for r in doc["rows"]}
    assert set(by_level) == {"base", "stats"} and doc["not_run"] == []
    assert all(r["model"] == "resnet18" and r["wrapper"] == "python" and r["mode"] == "default" for r in doc["rows"])
    stats = rows["python", "default", "ours 4 stats"]
    assert f"{by_level['stats']['step_s'] * 1e3:.3f}" == stats["ms/step"]
    assert by_level["stats"]["records"] == float(stats["records/step"]) and by_level["base"]["records"] is None
    made = _load("readme_table").table([(saved, doc)])
    assert "| ResNet-18 b32, channels_last (tiny) |" not in made  # (the preset is named: not the README's model)
    assert f"| resnet18 (tiny) | Python | – | {stats['x base']} | {stats['steady x base']} |" in made, made


@pytest.mark.slow
def test_transformer_cpp_wrapper_paired(tmp_path):
    """``--paired``: the stats row also times an uninstrumented compile in its own process,
    in turn with its steps, and its ratios are to that base (named in its notes and saved)."""
    saved = str(tmp_path / "run.json")
    rows = overhead("--model", "transformer", "--wrapper", "cpp", "--only", "ours 4 stats", "--paired", "1",
                    json_path=saved)
    check(rows, "cpp", "transformer")
    stats = rows["cpp", "default", "ours 4 stats"]
    paired = [n for n in stats["notes"].split("; ") if n.startswith("paired: base ")]
    assert paired, stats
    base_ms = float(paired[0].split()[2])
    assert base_ms > 0 and abs(float(stats["ms/step"]) / base_ms - float(stats["x base"])) < 0.01, stats
    by_level = {r["level"]: r for r in _load("saved_runs").read(saved)["rows"]}
    assert f"{by_level['stats']['base_step_s'] * 1e3:.3f}" == f"{base_ms:.3f}" and "base_step_s" not in by_level["base"]
    # (a paired base that writes records fails its row: overhead_row.py checks it)


def test_bad_arguments_are_refused_before_any_compile():
    script = os.path.join(REPO, "benchmarks", "overhead.py")
    for args, message in [(["--only", "ours 9 nothing"], "--only: unknown"),
                          (["--wrapper", "python,jit"], "--wrapper"),
                          (["--device", "cpu", "--cudagraphs"], "--cudagraphs needs"),
                          (["--device", "cpu", "--paired", "-1"], "--paired: a number of rounds")]:
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_graph_device_time_refuses_bad_arguments_and_a_machine_without_cuda():
    script = os.path.join(REPO, "benchmarks", "graph_device_time.py")
    for args, message in [(["--model", "vgg"], "unknown model or config: vgg"),
                          (["--configs", "stats"], "--configs must include base"),
                          (["--steps", "0"], "--steps and --rounds")]:
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    proc = subprocess.run([sys.executable, script, "--model", "resnet18"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("run it on the GPU machine"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_stats_kernel_compiles_refuses_bad_threads_and_a_machine_without_cuda():
    script = os.path.join(REPO, "benchmarks", "stats_kernel_compiles.py")
    for args, message in [(["--threads", "0"], "--threads: positive integers"),
                          (["--threads", "4,x"], "--threads: positive integers")]:
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("run it on the GPU machine"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_first_compile_refuses_bad_rounds_and_times_the_three_configs():
    script = os.path.join(REPO, "benchmarks", "first_compile.py")
    proc = subprocess.run([sys.executable, script, "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == "first_compile.py: --rounds must be 1 or more"
    out = subprocess.run([sys.executable, script, "--child", "stats, build at the header", "--preset", "tiny"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["first_call_s"] > 0


def test_stats_kernel_compile_threads_refuses_bad_arguments():
    script = os.path.join(REPO, "benchmarks", "stats_kernel_compile_threads.py")
    for args in (["--threads", "0"], ["--threads", "2,x"], ["--rounds", "0"]):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--threads: positive integers" in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def _load(name: str):
    """A benchmarks/ script as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(REPO, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_base_first_per_wrapper_and_mode():
    rows = _load("overhead").rows_for(["python", "aoti"], True, {"ours 4 stats", "built-in 1 save"})
    assert [(r["wrapper"], r["mode"], r["config"]) for r in rows] == [
        ("python", "default", "base"), ("python", "default", "ours 4 stats"), ("python", "default", "built-in 1 save"),
        ("aoti", "default", "base"), ("aoti", "default", "ours 4 stats"), ("aoti", "default", "built-in 1 save"),
        ("python", "reduce-overhead", "base"), ("python", "reduce-overhead", "ours 4 stats"),
    ]


def test_warm_rows_fill_each_groups_cache_once_before_the_timed_rows():
    overhead = _load("overhead")
    rows = overhead.rows_for(["python", "cpp"], True, {"ours 3 names", "ours 2 print", "ours 4 stats", "built-in 1 save"})
    assert [(r["wrapper"], r["mode"], r["config"]) for r in overhead.warm_rows(rows)] == [
        ("python", "default", "base"), ("python", "default", "ours 2 print"),
        ("cpp", "default", "base"), ("cpp", "default", "ours 2 print"),
        ("python", "reduce-overhead", "base"), ("python", "reduce-overhead", "ours 4 stats"),
        ("cpp", "reduce-overhead", "base"), ("cpp", "reduce-overhead", "ours 4 stats"),
    ]


def test_bytes_per_step_counts_appends_once_and_rewrites_every_step():
    bytes_per_step = _load("overhead_row").bytes_per_step
    before = {"manifest.jsonl": (100, 1.0), "tmp/overwritten.pt": (50, 1.0), "same.json": (10, 1.0)}
    after = {"manifest.jsonl": (400, 2.0), "tmp/overwritten.pt": (50, 2.0), "same.json": (10, 1.0),
             "tensors/new.pt": (1000, 2.0)}
    assert bytes_per_step(before, after, steps=10) == (300 + 1000) / 10 + 50


def test_local_resnet18_has_torchvision_layout():
    import torch

    from examples.models import ResNet18

    model = ResNet18()
    assert sum(p.numel() for p in model.parameters()) == 11_689_512  # torchvision's resnet18
    keys = model.state_dict().keys()
    assert {"conv1.weight", "bn1.running_var", "layer2.0.downsample.0.weight", "layer4.1.bn2.bias", "fc.bias"} <= keys
    try:
        import torchvision
    except ImportError:
        return  # the layout checks above are what can be checked without it
    model.load_state_dict(torchvision.models.resnet18(weights=None).state_dict())  # strict: same names and shapes
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


def test_express_cost_reaches_the_express_path():
    """benchmarks/express_cost.py times the hooks' express path: it refuses (exit 1) where
    its launches stop going express, so its numbers always time that path."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "express_cost.py"), "--launches", "4",
                           "--rounds", "2", "--steps", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 express launches a step" in proc.stdout and " us a launch (both hooks)" in proc.stdout, proc.stdout


def test_prebuilt_runtime_includes_the_stats_pack_of_cpp_rows_on_cuda(tmp_path, monkeypatch):
    """A C++ row that summarises on the device finds the stats pack (and for AOTI its object)
    built, as a user's cache holds it after the first compile: a row's compile time never
    includes that one-off build, and a row that builds one again is seen doing it."""
    from aoti_debug.codegen import device_stats, native_library, native_object

    overhead = _load("overhead")
    built = []

    def fake_compile(capability, chosen=None, workers=None):
        built.append(capability)
        return fake_stats_images(capability)

    spec = lambda name: type("Spec", (), {"directory": str(tmp_path / name),  # noqa: E731
                                          "path": str(tmp_path / name / "built")})()
    monkeypatch.setattr(device_stats, "compile_images", fake_compile)
    monkeypatch.setattr(device_stats, "pack_key", lambda capability: f"bench{capability:07x}")
    monkeypatch.setattr(device_stats, "capability", lambda: 7)
    monkeypatch.setattr(native_library, "build_spec", lambda: spec("library"))
    monkeypatch.setattr(native_library, "build", lambda s: None)
    monkeypatch.setattr(native_object, "object_spec", lambda variant: spec(f"object-{variant}"))
    rows = overhead.rows_for(["cpp", "aoti"], False, {"ours 3 names", "ours 4 stats"})

    folders, _seconds, why = overhead.prebuild_runtime(rows, "cuda")
    assert why is None
    pack = device_stats.pack_path(7)
    assert built == [7] and os.path.dirname(pack) in folders  # built once, for both wrappers
    assert any(os.path.basename(f).startswith("pack-sm7-") for f in os.listdir(os.path.dirname(pack)))  # AOTI's object
    found = overhead.runtime_builds(os.path.dirname(os.path.dirname(pack)))
    assert {os.path.basename(f) for f in found} >= {"pack-sm7.bin"}
    # On the CPU (or at names alone) no pack is built.
    assert os.path.dirname(pack) not in overhead.prebuild_runtime(rows, "cpu")[0]
    names_only = [r for r in rows if r["ours"] in (None, "names")]
    assert os.path.dirname(pack) not in overhead.prebuild_runtime(names_only, "cuda")[0]


def _saved_runs(tmp_path) -> list[str]:
    """Two runs as ``--json`` writes them: a GPU one (two modes, a save row, the disk's
    rate) and a CPU one (lockstep steps only)."""
    results = _load("saved_runs")
    row = results.row
    gpu = [row(model="resnet18", wrapper="python", mode="default", level="base", step_s=0.001, steady_s=0.002,
               compile_s=4.0, bytes_per_step=0, records=None),
           row(model="resnet18", wrapper="python", mode="default", level="stats", step_s=0.0025, steady_s=0.003,
               compile_s=4.0, bytes_per_step=150_000, records=311),
           row(model="resnet18", wrapper="python", mode="default", level="save", step_s=0.4, steady_s=0.5,
               bytes_per_step=400e6, records=311),
           # (timed in turn with a base of its own process, overhead.py --paired: its ratio is to that)
           row(model="resnet18", wrapper="python", mode="default", level="names", step_s=0.00099,
               base_step_s=0.0009, base_steady_s=0.002),
           row(model="resnet18", wrapper="python", mode="reduce-overhead", level="base", step_s=0.001, steady_s=0.001),
           row(model="resnet18", wrapper="python", mode="reduce-overhead", level="stats", step_s=0.0019,
               steady_s=0.0017),
           row(model="resnet18", wrapper="python", mode="reduce-overhead", level="names", step_s=0.0012,
               notes="CUDA graphs skipped (x1)"),
           row(model="resnet18", wrapper="cpp", mode="default", level="stats", step_s=0.003)]  # (no base: no line)
    cpu = [row(model="gpt2", wrapper="cpp", mode="default", level=level, step_s=t)
           for level, t in [("base", 0.001), ("stats", 0.00175), ("built-in print", 0.027)]]
    paths = [str(tmp_path / "gpu.json"), str(tmp_path / "cpu.json")]
    results.write(paths[0], tool="overhead.py", command="python3 benchmarks/overhead.py --model resnet18 --json x",
                  machine="NVIDIA H200, 16 CPU cores", torch_version="2.11.0+cu130", rows=gpu,
                  disk_bytes_per_s=2e9, extra={"preset": "full", "not_run": ["python default ours 2 print: timed out"]})
    results.write(paths[1], tool="overhead_cpu.py", command="python benchmarks/overhead_cpu.py --model gpt2 --json y",
                  machine="CPU, 2 cores (runs on [0])", torch_version="2.13.0+cpu", rows=cpu)
    return paths


def test_readme_table_is_made_from_saved_runs(tmp_path):
    table = _load("readme_table").table(_load("readme_table").load(_saved_runs(tmp_path)))
    lines = table.splitlines()
    assert lines[0] == _load("readme_table").BEGIN and lines[-1] == _load("readme_table").END
    assert lines[1].startswith("| machine [run] | model | wrapper | names | stats | stats, steady | print | save |")
    rows = [line for line in lines if line.startswith("| NVIDIA") or line.startswith("| CPU")]
    assert rows == [
        "| NVIDIA H200 [1] | ResNet-18 b32, channels_last | Python | 1.10 | 2.50 | 1.50 | – | 400 (2.00× the disk floor) | – | – |",
        "| NVIDIA H200 [1] | ResNet-18 b32, channels_last | Python, CUDA graphs | 1.20 (no CUDA graph) | 1.90 | 1.70 | – | – "
        "| – | – |",
        "| CPU [2] | GPT-2 2 layers (transformers) | `cpp_wrapper=True` | – | 1.75 | – | – | – | 27.00 | – |",
    ]
    runs = [line for line in lines if line[:3] in ("1. ", "2. ")]
    assert runs[0].startswith("1. `python3 benchmarks/overhead.py --model resnet18 --json x` (NVIDIA H200, 16 CPU "
                              "cores, torch 2.11.0+cu130, commit ") and "not run: python default ours 2 print" in runs[0]
    assert runs[1].startswith("2. `python benchmarks/overhead_cpu.py --model gpt2 --json y` (CPU, 2 cores")


def test_readme_table_writes_and_checks_a_readme_and_refuses_bad_input_in_one_line(tmp_path):
    paths = _saved_runs(tmp_path)
    script = os.path.join(REPO, "benchmarks", "readme_table.py")
    mod = _load("readme_table")
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{mod.BEGIN}\nold table\n{mod.END}\n\nafter\n")

    def run(*args):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in proc.stderr
        return proc

    assert run("--check", str(readme), *paths).returncode == 1
    assert run("--write", str(readme), *paths).returncode == 0
    text = readme.read_text()
    assert text.startswith("# title\n\n" + mod.BEGIN) and text.endswith(mod.END + "\n\nafter\n")
    assert "old table" not in text and "| CPU [2] |" in text
    assert run("--check", str(readme), *paths).returncode == 0
    assert run("--check", str(readme), paths[0]).returncode == 1  # a run less: another table
    (tmp_path / "plain.md").write_text("no markers\n")
    (tmp_path / "bad.json").write_text("{not json")
    for args, message in [(["--check", str(tmp_path / "plain.md"), *paths], "no table markers"),
                          ([str(tmp_path / "bad.json")], "not a benchmark result"),
                          ([str(tmp_path / "missing.json")], "not a benchmark result")]:
        proc = run(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_the_readmes_table_is_the_saved_runs():
    """README.md's overhead table is what ``benchmarks/results/*.json`` make: no hand-typed ratio."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "readme_table.py"), "--check",
                           os.path.join(REPO, "README.md")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_diff_scale_times_diff_and_show_of_a_synthetic_dump(tmp_path):
    """benchmarks/diff_scale.py at a small size: diff A A is EQUAL, diff A P names the
    perturbed record as the first divergence, show reads the dump; one table row each."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "diff_scale.py"), "--records", "3000",
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| diff ") or line.startswith("| show ")]
    assert [r.split("|")[1].strip() for r in rows] == ["diff A A", "diff A P", "show A"], proc.stdout
    assert [r.split("|")[2].strip() for r in rows] == ["0", "1", "0"], proc.stdout
    assert "FIRST DIVERGENCE: launch " in proc.stdout
    refused = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "diff_scale.py"), "--records", "5"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--records must be at least 100" in refused.stderr
