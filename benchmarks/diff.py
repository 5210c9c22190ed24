"""How fast ``aoti-debug diff`` compares large dumps, against a plain loop and the disk.

Makes two dumps of several GB through the real run writer (``RunWriter``, the
runtime's stats and checksum, ``torch.save``), B a perturbed copy of A so that every
pair differs and every byte must be read. Then, each in a fresh process with both
dumps evicted from the page cache first:

* disk:   read every tensor file of both dumps with large sequential reads;
* plain:  ``torch.load`` both files of each pair, then ``torch.allclose``;
* diff:   ``aoti_debug.diff(A, B, use_checksums=False)`` (what ``diff --full`` runs);
* diff (equal runs): A against an identical copy, default settings (checksums).

Prints GB/s (bytes of both dumps' tensor files / wall time) and each process's peak
RSS against the budget "2 x the two largest tensors + 300 MB".

    .venv/bin/python benchmarks/diff.py --dir /tmp/aoti_bench --gb 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

#: Tensor sizes in MiB cycled through when making a dump; dtypes alternate.
SIZES_MB = (512, 256, 128, 64, 32, 256, 16, 128, 4, 64, 1)
DTYPES = ("float32", "float32", "bfloat16", "float32")


def _evict(paths: list[str]) -> None:
    """Drop the files from the page cache, so each measurement reads from the disk."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _tensor_files(run: str) -> list[str]:
    out = []
    with open(os.path.join(run, "manifest.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("file"):
                out.append(os.path.join(run, rec["file"]))
    return out


def make_dumps(root: str, gb: float) -> tuple[str, str, str]:
    """Three runs under ``root``: a, b (perturbed a), same (identical to a)."""
    import torch

    from aoti_debug.format.schema import tensor_filename
    from aoti_debug.format.writer import RunWriter, new_run_info
    from aoti_debug.runtime.stats import tensor_stats

    paths = tuple(os.path.join(root, name) for name in ("a", "b", "same"))
    stamp = os.path.join(root, f"complete-{gb:g}")
    if os.path.exists(stamp):
        return paths  # type: ignore[return-value]
    subprocess.run(["rm", "-rf", *paths], check=True)
    writers = [RunWriter(p, new_run_info(os.path.basename(p), "save", 0, 1, device="cpu")) for p in paths]
    budget = gb * (1 << 30)
    total, seq, i = 0, 0, 0
    gen = torch.Generator().manual_seed(0)
    while total < budget:
        mb = SIZES_MB[i % len(SIZES_MB)]
        dtype = getattr(torch, DTYPES[i % len(DTYPES)])
        numel = (mb << 20) // torch.empty((), dtype=dtype).element_size()
        a = torch.randn(numel // 1024, 1024, generator=gen).to(dtype)
        b = (a.float() + 1e-3 * torch.randn(a.shape, generator=gen)).to(dtype)
        for phase_i, phase in enumerate(("before", "after")):
            seq += 1
            kernel, arg = f"triton_poi_fused_bench_{i}", f"buf{i}"
            for w, t in zip(writers, (a, b, a)):
                stats, checksum = tensor_stats(t)
                name = tensor_filename(seq, phase, kernel, arg)
                torch.save(t, w.tensor_path(name))
                w.append({
                    "seq": seq, "launch": i + 1, "graph": "graph0", "wrapper": "python", "kernel": kernel,
                    "op": kernel, "kernel_call": 0, "phase": phase, "arg": arg,
                    "role": "inout", "index": phase_i, "kind": "tensor", "dtype": str(t.dtype)[6:],
                    "shape": list(t.shape), "stride": list(t.stride()), "device": "cpu", "numel": t.numel(),
                    "stats": stats.to_dict(), "checksum": checksum, "file": f"tensors/{name}",
                })
            total += t.numel() * t.element_size()
        i += 1
        print(f"  made {total / 1e9:.2f} GB per dump", file=sys.stderr)
    for w in writers:
        w.close()
    open(stamp, "w").close()
    return paths  # type: ignore[return-value]


# -- the measured programs, each run in its own process -----------------------------------
def _child(mode: str, a: str, b: str) -> dict:
    # Imports happen before the clock starts: it measures comparing, not starting Python.
    import torch  # noqa: F401

    import aoti_debug.compare as C

    t0 = time.perf_counter()
    nbytes = 0
    if mode == "disk":
        buf = memoryview(bytearray(8 << 20))
        for p in _tensor_files(a) + _tensor_files(b):
            with open(p, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    nbytes += n
    elif mode == "plain":
        for fa, fb in zip(_tensor_files(a), _tensor_files(b)):
            ta = torch.load(fa, weights_only=True)
            tb = torch.load(fb, weights_only=True)
            torch.allclose(ta, tb)
            nbytes += os.path.getsize(fa) + os.path.getsize(fb)
            del ta, tb
    else:
        result = C.diff(a, b, use_checksums=(mode == "diff-checksums"), keep_passing=False)
        nbytes = sum(os.path.getsize(p) for p in _tensor_files(a) + _tensor_files(b))
        assert result.exit_code == (1 if b.endswith("b") else 0), str(result)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "bytes": nbytes, "peak_rss": _peak_rss()}


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM): unlike ru_maxrss it does not carry the
    parent's peak across fork+exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(mode: str, a: str, b: str, evict: bool = True) -> dict:
    if evict:
        _evict(_tensor_files(a) + _tensor_files(b))
    out = subprocess.run([sys.executable, __file__, "--child", mode, a, b], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{mode} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/aoti_bench")
    ap.add_argument("--gb", type=float, default=3.0, help="size of each dump's tensor files")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement (best kept)")
    ap.add_argument("--only", default=None, help="comma-separated modes to run (disk,plain,diff,diff-same,diff-checksums)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "A", "B"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    os.makedirs(args.dir, exist_ok=True)
    a, b, same = make_dumps(args.dir, args.gb)
    files = _tensor_files(a)
    sizes = sorted((os.path.getsize(p) for p in files), reverse=True)
    largest_pair = 2 * sizes[0]
    budget = 2 * largest_pair + (300 << 20)
    print(f"dumps: 2 x {sum(sizes) / 1e9:.2f} GB in {len(files)} tensor files each; largest tensor "
          f"{sizes[0] / 1e6:.0f} MB; memory budget 2 x {largest_pair / 1e6:.0f} MB + 300 MB = {budget / 1e6:.0f} MB; "
          f"{os.cpu_count()} CPUs")
    rows = []
    wanted = set(args.only.split(",")) if args.only else None
    for key, label, mode, other in (
            ("disk", "disk read (cat)", "disk", b), ("plain", "plain torch.load + allclose", "plain", b),
            ("diff", "aoti-debug diff --full (all pairs differ)", "diff", b),
            ("diff-same", "aoti-debug diff --full (equal runs)", "diff", same),
            ("diff-checksums", "aoti-debug diff (equal runs, checksums)", "diff-checksums", same)):
        if wanted and key not in wanted and key not in ("disk", "plain"):
            continue
        best = min((measure(mode, a, other) for _ in range(args.repeat)), key=lambda r: r["seconds"])
        rows.append((label, best))
        print(f"  {label}: {best['bytes'] / best['seconds'] / 1e9:.2f} GB/s, peak RSS {best['peak_rss'] / 1e6:.0f} MB",
              file=sys.stderr)
    disk = rows[0][1]["bytes"] / rows[0][1]["seconds"]
    plain = rows[1][1]["bytes"] / rows[1][1]["seconds"]
    print("\n| what | GB | seconds | GB/s | vs plain loop | vs disk | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        rate = r["bytes"] / r["seconds"]
        if "checksums" in label:  # reads manifests only: a rate per tensor byte means nothing
            print(f"| {label} | {r['bytes'] / 1e9:.2f} | {r['seconds']:.3f} | (no tensor read) | - | - | "
                  f"{r['peak_rss'] / 1e6:.0f} |")
            continue
        print(f"| {label} | {r['bytes'] / 1e9:.2f} | {r['seconds']:.2f} | {rate / 1e9:.2f} | {rate / plain:.1f}x | "
              f"{rate / disk:.0%} | {r['peak_rss'] / 1e6:.0f} |")
    ours = next(r for label, r in rows if "differ" in label) if any("differ" in l for l, _ in rows) else rows[-1][1]
    rate = ours["bytes"] / ours["seconds"]
    print(f"\nload average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"targets (all pairs differ): >= 3x plain: {rate / plain:.1f}x {'OK' if rate >= 3 * plain else 'MISSED'}; "
          f">= 70% of disk: {rate / disk:.0%} {'OK' if rate >= 0.7 * disk else 'MISSED'}; peak RSS "
          f"{ours['peak_rss'] / 1e6:.0f} MB <= {budget / 1e6:.0f} MB {'OK' if ours['peak_rss'] <= budget else 'MISSED'}")


if __name__ == "__main__":
    main()
