"""Step-time and compile-time overhead of each level, ours vs PyTorch's built-in printer.

A model (``--model transformer``: 4 blocks, d=1024, batch 8x256; ``--model resnet18``:
torchvision's ResNet-18 where it imports, else ``examples.models.ResNet18``, batch 32,
3x224x224, channels_last; both fp32, eval mode, under ``torch.no_grad``) is compiled
once per configuration, each in its own process with a fresh Inductor cache (not
``force_disable_caches``: that gives every compile a new temporary cache directory, where
aoti_debug's runtime, prebuilt here once as a user's cache holds it, would be built again
inside the timed compile), for each wrapper asked for:

* ``python``  ``torch.compile`` (the Python wrapper)
* ``cpp``     ``torch.compile`` with ``torch._inductor.config.cpp_wrapper=True``
* ``aoti``    ``torch.export`` -> ``aoti_compile_and_package`` -> ``aoti_load_package``

Rows per wrapper: ``base`` (uninstrumented), ``ours <n> <level>`` (``aoti_debug.enable``
before compiling; ``AOTI_DEBUG_DIR`` says where the dump goes when it runs) and
``built-in <n>`` (``aot_inductor.debug_intermediate_value_printer``). ``--cudagraphs``
(CUDA only) adds ``base``, ``ours 3 names`` and ``ours 4 stats`` compiled with
``mode="reduce-overhead"`` for each JIT wrapper. Each row: median step time and its ratio
to ``base`` of the same wrapper and mode, the compile time (the first call, less one timed
step: the first call also ran the model; for AOTI export, package, load and first call) and
its ratio, manifest records and MB written per step. With ``--triton-cache`` all rows share
a Triton cache, filled first by untimed rows (each group's base and its first level that
summarises on the device), so that every timed compile finds the kernels a user's second
compile finds; those untimed rows' compile times (a machine's first) are printed under the
table.

    python benchmarks/overhead.py                                   # transformer, full size
    python benchmarks/overhead.py --model resnet18 --wrapper python,cpp,aoti --cudagraphs
    python benchmarks/overhead.py --preset tiny --steps 2 --only "ours 4 stats" --format markdown

A step ends when its records are written (device synchronised, ``aoti_debug.flush()``
for the Python runtime's writer thread; the C++ runtimes and the built-in write in the
model thread), and gets a new input, so that content dedup cannot skip the writes.
``steady x base`` times the same steps back to back with one such wait at the end, as a
long job runs (records are written while the next steps run). With ``--paired ROUNDS``
each row of ours but save also compiles the model uninstrumented in its process (after
its timed compile) and times ROUNDS blocks of both in turn: its ratios are to that base,
not to the base row's, whose process may run the same steps faster or slower by more
than a cheap level costs (a GPU host: 1.19 against 1.41 ms for ResNet-18's base in two
calls).
Progress goes to stderr row by row; the table to stdout. A row that fails prints its
one-line error in the table and the run goes on; ``--time-limit`` stops starting rows
in time to print the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROW_SCRIPT = os.path.join(HERE, "overhead_row.py")
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # benchmarks/ has no __init__: no package name to shadow

import saved_runs  # noqa: E402
from overhead_row import CUDAGRAPHS, MODELS, one_line  # noqa: E402

WRAPPERS = ("python", "cpp", "aoti")

#: (config name, our level or None, the built-in's level or None).
ROWS = [
    ("base", None, None),
    ("ours 0 off", "off", None),
    ("ours 1 save", "save", None),
    ("ours 2 print", "print", None),
    ("ours 3 names", "names", None),
    ("ours 4 stats", "stats", None),
    ("built-in 0", None, "0"),
    ("built-in 1 save", None, "1"),
    ("built-in 2 print", None, "2"),
    ("built-in 3 names", None, "3"),
]
#: Under CUDA graphs the built-in's save crashes the capture (docs/troubleshooting.md).
CUDAGRAPH_ROWS = ("base", "ours 3 names", "ours 4 stats")
#: Environment variables that would instrument, or share a cache with, every row.
_DROPPED_ENV = ("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER", "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT",
                "TRITON_CACHE_DIR")
#: Lines of a failed row's log shown on stderr.
LOG_LINES = 12
#: Named in the table's command line when set (they change what is measured).
_SHOWN_ENV = ("CXX", "PYTHONPATH", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_COMPILE_THREADS")


# ---------------------------------------------------------------------------- the runs
def disk_write_rate(path: str, nbytes: int = 1 << 30) -> float:
    """Bytes/s of a large sequential write with fsync (the floor for the save level)."""
    buf = os.urandom(1 << 24)
    target = os.path.join(path, "disk_probe.bin")
    start = time.perf_counter()
    with open(target, "wb") as f:
        for _ in range(nbytes // len(buf)):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    rate = nbytes / (time.perf_counter() - start)
    os.unlink(target)
    return rate


def rows_for(wrappers: list[str], cudagraphs: bool, only: set[str] | None) -> list[dict]:
    """The configurations to run, ``base`` first in each (wrapper, mode) group."""
    out = []
    groups = [(w, "default", [r[0] for r in ROWS]) for w in wrappers]
    if cudagraphs:
        groups += [(w, CUDAGRAPHS, list(CUDAGRAPH_ROWS)) for w in wrappers if w != "aoti"]
    levels = {name: (ours, builtin) for name, ours, builtin in ROWS}
    for wrapper, mode, names in groups:
        for name in names:
            if name == "base" or only is None or name in only:
                ours, builtin = levels[name]
                out.append(dict(wrapper=wrapper, mode=mode, config=name, ours=ours, builtin=builtin))
    return out


def prebuild_runtime(rows: list[dict], device: str = "cpu") -> tuple[list[str], float, str | None]:
    """The runtime the instrumented rows use (the JIT library; AOTI's objects of their
    levels; on CUDA the stats kernels' pack, and its object for AOTI, where a C++ row's
    level summarises on the device), built once where an instrumented compile would put it
    (this process's Inductor cache) unless it is there: its folders, the seconds spent,
    and why it could not be built (None: it was). A user's cache holds them after the
    first compile; a row that built them again would time that one-off build."""
    jit = any(r["ours"] not in (None, "off") and r["wrapper"] != "aoti" for r in rows)
    aoti = {r["ours"] for r in rows if r["ours"] not in (None, "off") and r["wrapper"] == "aoti"}
    if not jit and not aoti:
        return [], 0.0, None
    from aoti_debug.codegen import device_stats, native_object
    from aoti_debug.codegen.prebuild import prebuild

    # the wrappers of the C++ rows whose level summarises on the device
    packed = {r["wrapper"] for r in rows if r["wrapper"] in ("cpp", "aoti") and r["ours"]
              and device_stats.wanted(device, r["ours"]) is not None}
    t0 = time.perf_counter()
    steps = prebuild(library=jit, objects=tuple(sorted({native_object.variant(level) for level in aoti})),
                     pack=bool(packed), pack_object="aoti" in packed)
    seconds = time.perf_counter() - t0
    failed = [s for s in steps if s.state in ("failed", "skipped")]
    if failed:  # no compiler, a failed build: each row builds its own (and says so)
        return [], seconds, failed[0].line()
    return list(dict.fromkeys(os.path.dirname(s.path) for s in steps)), seconds, None


def runtime_builds(cache: str) -> set[str]:
    """aoti_debug runtime artifacts anywhere under ``cache`` (the library, AOTI's objects,
    the stats kernels' packs and their objects)."""
    return {os.path.relpath(os.path.join(root, f), cache) for root, _dirs, files in os.walk(cache) for f in files
            if f == "libaoti_debug_rt.so" or (f.startswith("aoti_debug_rt-") and f.endswith(".o"))
            or (f.startswith("pack-sm") and f.endswith((".bin", ".o")))}


def warm_rows(rows: list[dict]) -> list[dict]:
    """What fills a shared Triton cache before the timed rows: each (wrapper, mode) group's
    base (the model's kernels) and its first row of ours that summarises on the device
    (aoti_debug's stats kernels), so that no timed row pays another row's first compile."""
    out, seen = [], set()
    for r in rows:
        key = (r["wrapper"], r["mode"], r["config"] == "base")
        if key not in seen and (r["config"] == "base" or r["ours"] in ("save", "print", "stats")):
            seen.add(key)
            out.append(r)
    return out


class Interrupted(BaseException):
    """SIGTERM (a time limit from outside): print what finished. Not an ``Exception``, so
    that the per-row handlers let it through."""


def _interrupt(_signum, _frame) -> None:
    raise Interrupted()


def _die_with_parent() -> None:
    """In the row's process before exec: killed when the parent dies (Linux), so that a
    run killed from outside leaves nothing on the device."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def run_row(row: dict, spec: dict, workdir: str, runtime: list[str], timeout: float,
            triton_cache: str | None = None) -> dict:
    """``row`` in its own process: fresh working directory, dump and Inductor cache (the
    prebuilt ``runtime`` folders copied in, as a user's cache holds them). ``triton_cache``:
    a Triton cache all rows share (else each row's is inside its fresh Inductor cache)."""
    work = tempfile.mkdtemp(prefix="row_", dir=workdir)
    cwd, cache = os.path.join(work, "cwd"), os.path.join(work, "inductor")
    os.makedirs(cwd)
    for folder in runtime if row["ours"] not in (None, "off") else ():
        shutil.copytree(folder, os.path.join(cache, "aoti_debug", os.path.basename(folder)),
                        ignore=shutil.ignore_patterns("build-*", "build.lock"), dirs_exist_ok=True)
    copied = runtime_builds(cache)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG_") and k not in _DROPPED_ENV}
    env.update(TORCHINDUCTOR_CACHE_DIR=cache, AOTI_DEBUG_DIR=os.path.join(cwd, "dump"))
    if triton_cache:
        env["TRITON_CACHE_DIR"] = triton_cache
    result_path = os.path.join(work, "result.json")
    log_path = os.path.join(work, "child.log")
    cmd = [sys.executable, ROW_SCRIPT, json.dumps({**spec, **row}), result_path]
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=_die_with_parent)
            try:
                rc = proc.wait(timeout=timeout)
            except (subprocess.TimeoutExpired, Interrupted, KeyboardInterrupt) as e:
                proc.kill()  # its compile workers exit when their parent's pipe closes
                proc.wait()
                if not isinstance(e, subprocess.TimeoutExpired):
                    raise
                return {"error": f"timed out after {timeout:.0f} s"}
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        else:
            why = f"died of signal {-rc}" if rc < 0 else f"exit {rc}"
            result = {"error": f"{why} before writing its result"}
        if runtime_builds(cache) - copied and "error" not in result:
            result["rebuilt"] = True
        if "error" in result:
            with open(log_path, errors="replace") as f:
                result["log"] = [line.rstrip()[:200] for line in f.readlines()[-LOG_LINES:]]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- the table
def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_rows(results: list[dict], disk: float | None) -> list[list[str]]:
    """One list of cells per result: ratios to the base of the same wrapper and mode."""
    bases = {(r["wrapper"], r["mode"]): r for r in results if r["config"] == "base" and "step" in r}
    out = []
    for r in results:
        cells = [r["wrapper"], r["mode"], r.get("model", ""), r["config"]]
        if "step" not in r:
            out.append(cells + [""] * 7 + [f"failed: {r['error']}" if "error" in r else r["skipped"]])
            continue
        base = bases.get((r["wrapper"], r["mode"]))
        notes = []
        if disk and r["bytes"] > 1e6:
            notes.append(f"{r['step'] / (r['bytes'] / disk):.2f}x the disk floor")
        if r.get("cudagraph_skips") is not None:
            skips = r["cudagraph_skips"]
            notes.append(f"CUDA graphs skipped (x{skips})" if skips else "CUDA graphs used (no skip)")
        if r["ours"] not in (None, "off", "names") and not r["records"]:
            notes.append("recorded nothing")
        notes += _how_it_compiled(r)
        if "base_step" in r:
            notes.append(f"paired: base {r['base_step'] * 1e3:.3f} ms in its process")
        step_base, steady_base = _bases(r, base)
        out.append(cells + [
            f"{r['step'] * 1e3:.3f}", _num(r["step"] / step_base if step_base else None, ".2f"),
            _num(r["steady"] / steady_base if steady_base else None, ".2f"),
            f"{r['compile']:.1f}", _num(r["compile"] / base["compile"] if base else None, ".2f"),
            _num(r["records"], ".0f"), f"{r['bytes'] / 1e6:.2f}", "; ".join(notes)])
    return out


def _bases(r: dict, base: dict | None) -> tuple[float | None, float | None]:
    """What a row's step and steady step are divided by: the base timed in its own process
    in turn with it (``--paired``), else the base row's."""
    if "base_step" in r:
        return r["base_step"], r["base_steady"]
    return (base["step"], base["steady"]) if base else (None, None)


def _how_it_compiled(r: dict) -> list[str]:
    """A row's notes on its compile, in the table and in a saved run alike."""
    notes = []
    if r.get("rebuilt"):
        notes.append("built its own runtime (in its compile time)")
    if r.get("background_compiles"):
        notes.append(f"{r['background_compiles']} stats kernels still compiling after the first call, "
                     f"done {r['background_s']:.1f} s later")
    return notes


HEADER = ["wrapper", "mode", "model", "config", "ms/step", "x base", "steady x base", "compile s", "compile x base",
          "records/step", "MB/step", "notes"]


def render(cells: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |",
                 "|" + "|".join("---" if i < 4 or i == 10 else "---:" for i in range(len(HEADER))) + "|"]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells])
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(HEADER[:-1])]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
                     for row in [HEADER, *cells]).rstrip()


def save_json(path: str, results: list[dict], disk: float | None, command: str, machine: str, torch_version: str,
              extra: dict) -> None:
    """The run as ``benchmarks/saved_runs.py`` writes one (rows that did not run are named in
    ``not_run``, with why)."""
    rows, not_run = [], []
    for r in results:
        if "step" not in r:
            not_run.append(f"{r['wrapper']} {r['mode']} {r['config']}: {r.get('error') or r.get('skipped')}")
            continue
        notes = []
        if r.get("cudagraph_skips") is not None:
            notes.append(f"CUDA graphs skipped (x{r['cudagraph_skips']})" if r["cudagraph_skips"] else "")
        notes += _how_it_compiled(r)
        rows.append(saved_runs.row(
            model=extra["model_key"], wrapper=r["wrapper"], mode=r["mode"],
            level=saved_runs.level_of(r["ours"], r["builtin"]), step_s=r["step"], steady_s=r["steady"],
            compile_s=r["compile"], bytes_per_step=r["bytes"], records=r["records"],
            base_step_s=r.get("base_step"), base_steady_s=r.get("base_steady"),
            notes="; ".join(n for n in notes if n)))
    saved_runs.write(path, tool="overhead.py", command=command, machine=machine, torch_version=torch_version,
                       rows=rows, disk_bytes_per_s=disk, extra={**extra, "not_run": not_run})


def command_line(argv: list[str]) -> str:
    """How this run was started, with the environment variables that change what it measures."""
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _SHOWN_ENV if k in os.environ]
    script = os.path.relpath(os.path.abspath(__file__), os.getcwd())
    return " ".join([*env, shlex.join([os.path.basename(sys.executable), script, *argv])])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="transformer")
    ap.add_argument("--preset", choices=["full", "small", "tiny"], default="full", help="the model's size")
    ap.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    ap.add_argument("--wrapper", default="python", help="comma-separated: python, cpp, aoti")
    ap.add_argument("--cudagraphs", action="store_true",
                    help="also base, ours 3 names and ours 4 stats under mode='reduce-overhead' (CUDA)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per row (default: 20 on CUDA, 3 on CPU)")
    ap.add_argument("--only", default=None, help="comma-separated configs to run besides base")
    ap.add_argument("--format", choices=["text", "markdown"], default="text")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds: no row starts after this, a running row is stopped; the table is printed")
    ap.add_argument("--row-timeout", type=float, default=900.0, help="seconds one row may take")
    ap.add_argument("--workdir", default=None, help="where rows run and dump (default: a temp dir)")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the run (command, machine, a row per config) to PATH as JSON: "
                         "what benchmarks/readme_table.py builds the README's table from")
    ap.add_argument("--paired", type=int, default=0, metavar="ROUNDS",
                    help="each row of ours but save also compiles the model uninstrumented in its own "
                         "process and times ROUNDS blocks of steps of both in turn: its ratios are to "
                         "that base (the base row's process is another, whose step may differ by more "
                         "than a cheap level costs); default 0: ratios to the base row")
    ap.add_argument("--triton-cache", default=None, metavar="DIR",
                    help="a Triton cache shared by all rows, filled first by untimed rows (the model's "
                         "and aoti_debug's stats kernels), as on a machine that has compiled them "
                         "before; their first-compile times are printed under the table; default: "
                         "each row compiles everything")
    args = ap.parse_args(argv)
    start = time.monotonic()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    wrappers = args.wrapper.split(",")
    if not set(wrappers) <= set(WRAPPERS) or len(set(wrappers)) != len(wrappers):
        ap.error(f"--wrapper: a comma-separated subset of {', '.join(WRAPPERS)}, not {args.wrapper!r}")
    if args.cudagraphs and (device != "cuda" or wrappers == ["aoti"]):
        ap.error("--cudagraphs needs --device cuda and a JIT wrapper (python or cpp)")
    only = None if args.only is None else {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = (only or set()) - {r[0] for r in ROWS}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; configs are: {', '.join(r[0] for r in ROWS)}")
    steps = args.steps or (20 if device == "cuda" else 3)
    rows = rows_for(wrappers, args.cudagraphs, only)
    if args.paired < 0:
        ap.error("--paired: a number of rounds, 0 for none")
    spec = dict(model=args.model, preset=args.preset, device=device, steps=steps, paired=args.paired)

    workdir = args.workdir or tempfile.mkdtemp(prefix="aoti_debug_bench_")
    os.makedirs(workdir, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)

    def time_left() -> float:
        """Seconds a row may take now (``--time-limit`` less what has run, else ``--row-timeout``)."""
        return args.row_timeout if args.time_limit is None else args.time_limit - (time.monotonic() - start)

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - start:6.0f} s] {msg}", file=sys.stderr, flush=True)

    results: list[dict] = []
    cold: list[str] = []
    disk = None
    try:
        if any(r["config"].endswith("save") for r in rows):
            try:
                disk = disk_write_rate(workdir)
                progress(f"disk write {disk / 1e9:.2f} GB/s")
            except OSError as e:
                progress(f"disk write rate not measured: {one_line(e)}")
        runtime, build_s, why = prebuild_runtime(rows, device)
        progress(f"runtime not prebuilt: {why}" if why else f"runtime ready in {build_s:.1f} s: {runtime}")
        if args.triton_cache and device == "cuda":  # CPU compiles no Triton kernel
            for row in warm_rows(rows):
                what = f"{row['wrapper']} {row['mode']} {row['config']}"
                progress(f"warming the Triton cache: {what} (untimed) ...")
                r = run_row(row, {**spec, "steps": 1}, workdir, runtime, min(args.row_timeout, max(time_left(), 1.0)),
                            args.triton_cache)
                r.pop("log", None)
                if "error" in r:
                    progress(f"warming {what}: failed: {r['error']}")
                else:
                    cold.append(f"{what} {r['first_call']:.1f} s")
                    progress(f"warming {what}: first call {r['first_call']:.1f} s")
        for i, row in enumerate(rows):
            left = time_left()
            what = f"{row['wrapper']} {row['mode']} {row['config']}"
            if left < 10:
                results.append({**row, "skipped": "not run: time limit"})
                progress(f"[{i + 1}/{len(rows)}] {what}: not run (time limit)")
                continue
            progress(f"[{i + 1}/{len(rows)}] {what} ...")
            t0 = time.monotonic()
            try:
                r = {**row, **run_row(row, spec, workdir, runtime, min(args.row_timeout, left),
                                         args.triton_cache)}
            except Exception as e:  # the harness around the row (a full disk, ...): this row only
                r = {**row, "error": one_line(e)}
            results.append(r)
            for line in r.pop("log", []):
                print(f"    | {line}", file=sys.stderr)
            done = (f"failed: {r['error']}" if "error" in r else
                    f"{r['step'] * 1e3:.3f} ms/step, compile {r['compile']:.1f} s, "
                    f"records/step {_num(r['records'], '.0f')}, {r['bytes'] / 1e6:.2f} MB/step")
            progress(f"[{i + 1}/{len(rows)}] {what}: {done} ({time.monotonic() - t0:.0f} s)")
    except (Interrupted, KeyboardInterrupt):
        progress("interrupted: the table holds the rows that finished")
        done_keys = {(r["wrapper"], r["mode"], r["config"]) for r in results}
        results += [{**r, "skipped": "not run: interrupted"} for r in rows
                    if (r["wrapper"], r["mode"], r["config"]) not in done_keys]
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    measured = next((r for r in results if "step" in r), {})
    models = sorted({r["model"] for r in results if "model" in r})
    params = MODELS[args.model][args.preset]
    print(f"Command: `{command_line(sys.argv[1:] if argv is None else argv)}`")
    triton = f", triton {measured['triton']}" if measured.get("triton") and device == "cuda" else ""
    print(f"\n{measured.get('device', device)}, torch {measured.get('torch', torch.__version__)}{triton}, "
          f"{os.cpu_count()} CPU cores; {', '.join(models) or args.model} {args.preset} {params}, fp32, eval, "
          f"no_grad; {steps} timed steps per row, median"
          + (f"; disk write {disk / 1e9:.2f} GB/s" if disk else "") + "\n")
    print(render(table_rows(results, disk), args.format == "markdown"))
    if args.json:
        save_json(args.json, results, disk, command_line(sys.argv[1:] if argv is None else argv),
                  f"{measured.get('device', device)}, {os.cpu_count()} CPU cores", measured.get("torch", torch.__version__),
                  dict(model_key=args.model, preset=args.preset, steps=steps, models=models,
                       triton=measured.get("triton") if device == "cuda" else None, cold_compiles=cold))
    if cold:
        print(f"\nCompile (first call) with the Triton cache cold, untimed warm-up before the rows: {', '.join(cold)}")
    by_key = {(r["wrapper"], r["mode"], r["config"]): r for r in results if "step" in r}
    for wrapper in wrappers:
        a, b = by_key.get((wrapper, "default", "ours 1 save")), by_key.get((wrapper, "default", "built-in 1 save"))
        if a and b:
            print(f"\n{wrapper}: ours save is {b['step'] / a['step']:.1f}x the speed of built-in save "
                  f"({a['bytes'] / 1e6:.0f} MB vs {b['bytes'] / 1e6:.0f} MB written per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
