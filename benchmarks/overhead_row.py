"""One row of benchmarks/overhead.py: compile and time one configuration in this process.

Started by ``overhead.py`` as ``python benchmarks/overhead_row.py SPEC RESULT`` in a fresh
working directory with a fresh Inductor cache and ``AOTI_DEBUG_DIR`` set; writes the
row's numbers (or its one-line error, the traceback going to its log) to RESULT as JSON.
SPEC: model, preset, device, steps, wrapper (python|cpp|aoti), mode (default|
reduce-overhead), ours (a level or null), builtin (the built-in's level or null), and
``paired`` (rounds): a row of ours at a level other than save also compiles the model
uninstrumented in its own process, after its timed compile, and times blocks of steps of
both in turn, so that its ratio is to a base of the same process (a GPU host's step moves
from process to process by more than the cheap levels cost).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

MODELS = {
    "transformer": {
        "full": dict(d=1024, heads=16, layers=4, batch=8, seq=256),
        "small": dict(d=256, heads=8, layers=4, batch=4, seq=128),
        "tiny": dict(d=64, heads=4, layers=2, batch=2, seq=32),
    },
    "resnet18": {
        "full": dict(batch=32, size=224),
        "small": dict(batch=4, size=112),
        "tiny": dict(batch=2, size=32),
    },
}
CUDAGRAPHS = "reduce-overhead"


@contextlib.contextmanager
def quiet():
    """Send fd 1 and 2 to /dev/null (print levels write a lot; the terminal is not the cost)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(devnull)
        os.close(saved[0])
        os.close(saved[1])


def file_sizes(path: str) -> dict[str, tuple[int, float]]:
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            try:
                st = os.stat(full)
            except OSError:
                continue
            out[full] = (st.st_size, st.st_mtime)
    return out


def bytes_per_step(before: dict, after: dict, steps: int) -> float:
    """New files and growth (an appended manifest) count once; files rewritten in place
    count once per step (the built-in overwrites the same files on every call)."""
    added = rewritten = 0
    for f, (size, mtime) in after.items():
        old_size, old_mtime = before.get(f, (0, None))
        if old_mtime is None or size > old_size:
            added += size - old_size
        elif mtime > old_mtime:
            rewritten += size
    return added / steps + rewritten


def manifest_records(path: str) -> int | None:
    """Records in every ``manifest.jsonl`` under ``path`` (None: there is none)."""
    found = None
    for root, _dirs, files in os.walk(path):
        if "manifest.jsonl" in files:
            with open(os.path.join(root, "manifest.jsonl"), "rb") as f:
                found = (found or 0) + f.read().count(b"\n")
    return found


def build_model(name: str, preset: str, device: str):
    """The model in eval mode on ``device``, an input, and which implementation it is."""
    import torch

    p = MODELS[name][preset]
    torch.manual_seed(0)
    if name == "transformer":
        from examples.models import Transformer

        model = Transformer(p["d"], p["heads"], p["layers"]).to(device).eval()
        return model, torch.randn(p["batch"], p["seq"], p["d"], device=device), "transformer"
    try:
        import torchvision

        model, source = torchvision.models.resnet18(weights=None), f"resnet18 (torchvision {torchvision.__version__})"
    except Exception as e:  # not installed, or built for another torch (its ops fail to register)
        from examples.models import ResNet18

        print(f"torchvision: {one_line(e)}; examples.models.ResNet18 instead", file=sys.stderr)
        model, source = ResNet18(), "resnet18 (local)"
    model = model.to(device, memory_format=torch.channels_last).eval()
    x = torch.randn(p["batch"], 3, p["size"], p["size"], device=device).contiguous(memory_format=torch.channels_last)
    return model, x, source


def measure(spec: dict, work: str) -> dict:
    """Compile and time one configuration in this (fresh) process; the row's numbers."""
    import torch
    import torch._inductor.config as iconfig
    from torch._dynamo.utils import counters

    import aoti_debug

    device, wrapper, steps = spec["device"], spec["wrapper"], spec["steps"]
    cudagraphs = spec["mode"] == CUDAGRAPHS

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()
        aoti_debug.flush()  # the Python runtime's writer thread: its work is part of the step

    model, x, source = build_model(spec["model"], spec["preset"], device)
    with torch.no_grad():
        model(x)  # eager once: the device's and libraries' lazy initialisation is nobody's compile
        # A small compile first pays what the first compile of a process pays once
        # (Triton's import, the compile workers' start), so the model's compile is timed alone.
        torch.compile(lambda a: torch.relu(a @ a) + 1)(torch.randn(16, 16, device=device))
        sync()
    torch._dynamo.reset()
    if spec["ours"]:
        aoti_debug.enable(spec["ours"])  # compile-time switch; AOTI_DEBUG_DIR (set by the parent) at run time
    patches = {"cpp_wrapper": wrapper == "cpp",
               "aot_inductor.debug_intermediate_value_printer": spec["builtin"] or "0"}
    skips_before = counters["inductor"]["cudagraph_skips"]
    with iconfig.patch(patches):
        t0 = time.perf_counter()
        call = compiled(model, x, wrapper, cudagraphs, os.path.join(work, "model.pt2"))
        with torch.no_grad():
            call(x)
            sync()
            compile_s = time.perf_counter() - t0
            # AOTI_DEBUG_STATS_COMPILE=background: stats kernels may still be compiling (their
            # tensors take torch ops meanwhile); the timed steps start once they are done.
            t0 = time.perf_counter()
            background = 0
            if spec["ours"] and device == "cuda":
                from aoti_debug.runtime import fused_stats

                background = fused_stats.wait_for_compiles()
            background_s = time.perf_counter() - t0
            warm = 3 if cudagraphs else 1  # CUDA graphs: a warm-up run, the recording, a replay
            for _ in range(warm):
                call(x)
            sync()
            # (save and the built-in printer cost tens of steps or more: a base of their own
            # process would move their ratio by less than the disk does, for a compile more)
            rounds = int(spec.get("paired") or 0) if spec["ours"] not in (None, "off", "save") else 0
            base_call = None
            if rounds:
                base_call = paired_base(model, x, wrapper, cudagraphs, work, warm)
                sync()
            dump = os.getcwd()
            files, records = file_sizes(dump), manifest_records(dump)
            # A fresh input each step: values that repeat across steps would flatter a
            # dump that stores identical tensors once.
            inputs = [torch.randn_like(x) for _ in range(steps)]
            sync()
            times, base_times, steadies, base_steadies = [], [], [], []
            written = after = None
            with quiet():
                for _ in range(max(rounds, 1)):
                    if base_call is not None:
                        before = manifest_records(dump)
                        base_times += lockstep(base_call, inputs, sync)
                        if manifest_records(dump) != before:
                            raise RuntimeError("the paired base wrote records: it was compiled instrumented")
                    times += lockstep(call, inputs, sync)
                    if written is None:
                        written = bytes_per_step(files, file_sizes(dump), steps)
                        after = manifest_records(dump)
                    # Steady state, as a long job runs: the same steps back to back, one wait
                    # for the device and the records at the end (the writer's work overlaps
                    # the next steps).
                    if base_call is not None:
                        base_steadies.append(back_to_back(base_call, inputs, sync))
                    steadies.append(back_to_back(call, inputs, sync))
    steady = statistics.median(steadies)
    step = statistics.median(times)
    # The first call ran the model once as well (at save: wrote a step's tensors); what it
    # took beyond a timed step is the compile's.
    paired = {"base_step": statistics.median(base_times), "base_steady": statistics.median(base_steadies),
              "rounds": rounds} if base_times else {}
    return {
        **paired,
        "step": step, "steady": steady, "compile": max(compile_s - step, 0.0), "first_call": compile_s,
        "background_compiles": background, "background_s": background_s if background else 0.0,
        "bytes": written,
        "records": None if after is None else (after - (records or 0)) / steps,
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - skips_before if cudagraphs else None,
        "model": source, "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "torch": torch.__version__, "triton": getattr(sys.modules.get("triton"), "__version__", None),
    }


def lockstep(call, inputs, sync) -> list[float]:
    """Seconds of each step, each ended by ``sync``."""
    times = []
    for xi in inputs:
        t0 = time.perf_counter()
        call(xi)
        sync()
        times.append(time.perf_counter() - t0)
    return times


def back_to_back(call, inputs, sync) -> float:
    """Seconds a step of the steps run back to back, one ``sync`` at the end."""
    t0 = time.perf_counter()
    for xi in inputs:
        call(xi)
    sync()
    return (time.perf_counter() - t0) / len(inputs)


def compiled(model, x, wrapper: str, cudagraphs: bool, package: str):
    """``model`` compiled by ``wrapper`` (AOTInductor: exported, packaged at ``package`` and
    loaded; the JIT wrappers compile at the first call): a function of one input, under
    ``cudagraphs`` a new generation of the CUDA-graph tree each call."""
    import torch

    if wrapper == "aoti":
        ep = torch.export.export(model, (x,))
        fn = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(ep, package_path=package))
    else:
        fn = torch.compile(model, mode=CUDAGRAPHS if cudagraphs else None)

    def call(xi):
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()  # each step a new generation of the tree
        fn(xi)

    return call


def paired_base(model, x, wrapper: str, cudagraphs: bool, work: str, warm: int):
    """``model`` compiled again without instrumentation, in this process, for steps timed
    in turn with the instrumented ones: aoti_debug's codegen is taken out without Dynamo's
    reset (which would drop the instrumented compile) while it compiles (its first call),
    and the model is called through a subclass whose ``forward`` is a code object of its
    own, so that Dynamo does not hand back the instrumented frame. Called ``warm`` times
    more after its compile."""
    import copy

    import torch._inductor.config as iconfig

    from aoti_debug.codegen import inductor

    twin = model
    if wrapper != "aoti":  # (AOTInductor: a second package, nothing of Dynamo's)
        parent = type(model)

        class PairedBase(parent):
            def forward(self, *args, **kwargs):
                return parent.forward(self, *args, **kwargs)

        twin = copy.copy(model)  # (the same parameters and buffers)
        twin.__class__ = PairedBase
    settings = inductor.active_settings()
    inductor.uninstall()
    try:
        with iconfig.patch({"cpp_wrapper": wrapper == "cpp", "aot_inductor.debug_intermediate_value_printer": "0"}):
            call = compiled(twin, x, wrapper, cudagraphs, os.path.join(work, "base.pt2"))
            call(x)  # a JIT wrapper compiles here, at the first call
    finally:
        if settings is not None:
            inductor.install(settings)
    for _ in range(warm):
        call(x)
    return call


def one_line(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:160]


def main(spec: dict, result_path: str) -> int:
    """Writes the row's numbers, or its one-line error, to ``result_path`` as JSON."""
    try:
        result = measure(spec, os.path.dirname(result_path))
    except BaseException as e:  # the parent reports it in the row; the run goes on
        import traceback

        traceback.print_exc()  # into the row's log, whose tail the parent shows
        result = {"error": one_line(e)}
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1]), sys.argv[2]))
