"""Step-time and compile-time overhead of each level, ours vs PyTorch's built-in printer.

For a transformer (default: 4 blocks, d=1024, batch 8x256, fp32) compiled with
``torch.compile``, prints one row per configuration: the median step time as a ratio
to an uninstrumented compile of the same model, the compile time ratio, and bytes
written per step. Save-level rows also show how close the step comes to the floor
set by the disk (bytes written / measured disk write rate).

    python benchmarks/overhead.py                      # full size (GPU if present)
    python benchmarks/overhead.py --preset small       # CPU-friendly size
    python benchmarks/overhead.py --wrapper cpp        # cpp_wrapper=True rows

A save-level step includes waiting for its files: the timing loop ends with
``aoti_debug.flush()``, so background writing cannot hide cost.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aoti_debug  # noqa: E402
from examples.models import Transformer  # noqa: E402

PRESETS = {
    "full": dict(d=1024, heads=16, layers=4, batch=8, seq=256),
    "small": dict(d=256, heads=8, layers=4, batch=4, seq=128),
}


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


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


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
    """New files count once; files that existed and were rewritten count once per step
    (the built-in overwrites the same files on every call)."""
    new = sum(size for f, (size, _m) in after.items() if f not in before)
    rewritten = sum(size for f, (size, m) in after.items() if f in before and m > before[f][1])
    return new / steps + rewritten


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


def measure(name, model, x, device, steps, workdir, ours=None, builtin=None, cpp=False):
    """Compile and time one configuration; returns a result dict."""
    torch._dynamo.reset()
    import torch._inductor.config as iconfig

    dump = os.path.join(workdir, name.replace(" ", "_"))
    os.makedirs(dump, exist_ok=True)
    old_cwd = os.getcwd()
    os.chdir(dump)  # the built-in level 1 writes under cwd/tmp
    patches = {"aot_inductor.debug_intermediate_value_printer": builtin or "0", "cpp_wrapper": cpp,
               "force_disable_caches": True}
    ctx = aoti_debug.enabled(level=ours, dump_dir=dump) if ours else contextlib.nullcontext()
    try:
        with iconfig.patch(patches), ctx, torch.no_grad(), quiet():
            fn = torch.compile(model)
            t0 = time.perf_counter()
            fn(x)
            sync(device)
            aoti_debug.flush()
            compile_s = time.perf_counter() - t0
            fn(x)
            sync(device)
            aoti_debug.flush()
            before = file_sizes(dump)
            times = []
            # A fresh input each step: values that repeat across steps would flatter a
            # dump that stores identical tensors once.
            inputs = [torch.randn_like(x) for _ in range(steps)]
            sync(device)
            for xi in inputs:
                t0 = time.perf_counter()
                fn(xi)
                sync(device)
                aoti_debug.flush()
                times.append(time.perf_counter() - t0)
            written = bytes_per_step(before, file_sizes(dump), steps)
    finally:
        os.chdir(old_cwd)
        shutil.rmtree(dump, ignore_errors=True)
    return {"name": name, "step": statistics.median(times), "compile": compile_s, "bytes": written}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="full")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    p.add_argument("--wrapper", choices=["python", "cpp"], default="python")
    p.add_argument("--only", default=None, help="comma-separated row names to run")
    p.add_argument("--workdir", default=None, help="where dumps are written (default: a temp dir)")
    args = p.parse_args()
    cfg = PRESETS[args.preset]
    steps = args.steps or (20 if args.device == "cuda" else 3)
    torch.manual_seed(0)
    model = Transformer(cfg["d"], cfg["heads"], cfg["layers"]).to(args.device).eval()
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d"], device=args.device)
    workdir = args.workdir or tempfile.mkdtemp(prefix="aoti_debug_bench_")
    cpp = args.wrapper == "cpp"

    rows = [
        ("uninstrumented", {}),
        ("ours 0 off", {"ours": "off"}),
        ("ours 1 save", {"ours": "save"}),
        ("ours 2 print", {"ours": "print"}),
        ("ours 3 names", {"ours": "names"}),
        ("ours 4 stats", {"ours": "stats"}),
        ("built-in 0", {"builtin": "0"}),
        ("built-in 1 save", {"builtin": "1"}),
        ("built-in 2 print", {"builtin": "2"}),
        ("built-in 3 names", {"builtin": "3"}),
    ]
    if args.only:
        wanted = {"uninstrumented", *args.only.split(",")}
        rows = [r for r in rows if r[0] in wanted]
    disk = disk_write_rate(workdir)
    measure("warm-up", model, x, args.device, 1, workdir, cpp=cpp)  # first compile pays one-time costs
    print(f"# {args.preset}: {cfg}, device={args.device} "
          f"({torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}), wrapper={args.wrapper}, "
          f"torch {torch.__version__}, {steps} timed steps, disk write {disk / 1e9:.2f} GB/s", flush=True)
    results = []
    for name, kw in rows:
        if kw.get("ours") == "off":
            kw = {}
        try:
            r = measure(name, model, x, args.device, steps, workdir, cpp=cpp, **kw)
        except Exception as e:  # a row that crashes (the built-in under some configs) is reported, not fatal
            r = {"name": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"}
        results.append(r)
        print(f"  measured {name}: {r}", file=sys.stderr, flush=True)

    base = results[0]
    print("\n| config | step median (ms) | step ratio | compile ratio | MB written/step | save floor ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['name']} | failed: {r['error']} | | | | |")
            continue
        floor = r["bytes"] / disk if r["bytes"] else 0.0
        floor_ratio = f"{r['step'] / floor:.2f}" if r["bytes"] > 1e6 else ""
        print(f"| {r['name']} | {r['step'] * 1e3:.2f} | {r['step'] / base['step']:.2f} | "
              f"{r['compile'] / base['compile']:.2f} | {r['bytes'] / 1e6:.1f} | {floor_ratio} |")
    ours = {r["name"]: r for r in results if "error" not in r}
    if "ours 1 save" in ours and "built-in 1 save" in ours:
        a, b = ours["ours 1 save"], ours["built-in 1 save"]
        print(f"\nours save vs built-in save: {b['step'] / a['step']:.1f}x faster per step "
              f"({a['bytes'] / 1e6:.0f} MB vs {b['bytes'] / 1e6:.0f} MB written per step)")


if __name__ == "__main__":
    main()
