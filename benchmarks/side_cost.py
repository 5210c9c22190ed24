"""Host cost of one instrumented launch side at level stats, and of its parts.

    python benchmarks/side_cost.py [--device cuda] [--iters 3000] [--numel 2097152]

A launch of the Python wrapper at level stats calls ``GraphHandle.launch`` (inputs) and
``GraphHandle.done`` (outputs). This times that pair for a site of two float32 inputs and
one output (the shape of a transformer's matmul epilogue), contiguous and with one
transposed input, an attention fallback's pair (its output a tuple: two tensors of the
device and, as the CUDA kernel returns them outside a capture, two CPU RNG seeds), and
then each part of the path alone, so that a change to the hot path can be judged by the
part it changes. Medians over ``--iters`` calls, in microseconds of
host time (the device work is not waited for; the writer thread is flushed outside the
timed calls). Absolute times only from the GPU machine; on CPU the path differs (no ring).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402


def timed(fn, iters: int, every: int = 0, between=None) -> float:
    """Median microseconds of ``fn()`` over ``iters`` calls; ``between()`` untimed every ``every``."""
    out = []
    for i in range(iters):
        if every and i % every == 0 and between is not None:
            between()
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return statistics.median(out) / 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--numel", type=int, default=2048 * 1024)
    args = p.parse_args()
    os.environ["AOTI_DEBUG_DIR"] = tempfile.mkdtemp(prefix="side_cost_")
    os.environ["AOTI_DEBUG_LEVEL"] = "stats"
    import aoti_debug
    from aoti_debug.codegen import native_library
    from aoti_debug.runtime import device_ring, fused_stats, hooks, session

    dev = torch.empty(0, device=args.device).device  # with its index, as tensors carry it
    n = args.numel
    rows = 1024
    a = torch.randn(n, device=dev)
    b = torch.randn(n, device=dev)
    out = torch.randn(n, device=dev)
    bt = torch.randn(rows, n // rows, device=dev).t()  # not contiguous: copied before the kernel
    native = native_library.stats_library_path()  # as a wrapper at level stats passes it (CPU tensors)
    handle = hooks.graph(None, "stats", False, info=(), protocol=hooks.PROTOCOL_VERSION, native=native)
    site = handle.site(("", "k_side_cost", "k_side_cost",
                        (("a", "input", "tensor", "a", False, (), ()), ("b", "input", "tensor", "b", False, (), ())),
                        (("out", "output", "tensor", "out", False, (), ()),), None, 0, ""))

    seeds = (("[2]", "RNG seed"), ("[3]", "RNG offset"))
    attention = handle.site(("", "k_side_cost_attention", "aten._scaled_dot_product_efficient_attention.default",
                             tuple((x, "input", "tensor", x, False, (), ()) for x in ("q", "k", "v")),
                             (("buf5", "output", "unknown", "buf5", False, seeds, ()),), None, 1, ""))
    if site is None or attention is None:  # the site literal's layout moved on: fix it here
        raise SystemExit("side_cost.py: a site literal is malformed (see the warning above)")
    heads = torch.randn(n // rows, rows, device=dev)
    attended = (torch.randn(n // rows, rows, device=dev), torch.randn(n // rows, device=dev),
                torch.empty((), dtype=torch.int64), torch.empty((), dtype=torch.int64))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()
        aoti_debug.flush()

    def pair(x, y):
        def run():
            handle.launch(site, (x, y))
            handle.done(site, (out,))
        return run

    print(f"side cost on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"{n} float32 elements a tensor, median of {args.iters} calls (us of host time)", flush=True)

    def row(name, fn, iters=args.iters, every=100):
        for _ in range(20):
            fn()
        sync()
        print(f"  {name:<48} {timed(fn, iters, every, sync):9.2f}", flush=True)

    row("launch+done, 3 tensors (2 in, 1 out)", pair(a, b))
    row("launch+done, one input transposed", pair(a, bt))

    def attend():
        handle.launch(attention, (heads, heads, heads))
        handle.done(attention, (attended,))
    row("launch+done, attention fallback (a tuple out)", attend)
    row("_tensor_meta x3", lambda: [hooks._tensor_meta(t) for t in (a, b, out)])
    row("torch.cuda.is_current_stream_capturing" if dev.type == "cuda" else "hooks._capturing",
        hooks._capturing)
    row("hooks._device_label", hooks._device_label)
    row("aoti_debug.flush() with nothing queued", aoti_debug.flush)
    sess = session.current()
    row("session.next_launch", lambda: sess.next_launch("graph0", "k_side_cost"))
    row("session.next_seq(3)", lambda: sess.next_seq(3))
    row("t.data_ptr() x3", lambda: [t.data_ptr() for t in (a, b, out)])
    row("t.is_contiguous() x3", lambda: [t.is_contiguous() for t in (a, b, out)])
    row("fused_stats._prepare x3", lambda: [fused_stats._prepare(t) for t in (a, b, out)])
    row("bt.contiguous() (the copy)", lambda: bt.contiguous())
    if dev.type == "cuda" and fused_stats.enabled_for(dev):
        ring = device_ring.ring_for(dev)
        row("device_ring.ring_for", lambda: device_ring.ring_for(dev))
        seg, first = ring.reserve(2)

        def summ2():
            fused_stats.summarize([a, b], into=(seg.buf, first))

        def planned():
            fused_stats._sides.clear()
            summ2()
        row("summarize 2 tensors into the ring, seen before", summ2)
        row("summarize 2 tensors into the ring, planned", planned)
        row("fused_stats._stream_key", lambda: fused_stats._stream_key(dev))
        row("fused_stats._on_device", lambda: fused_stats._on_device(dev))
        row("buf[8*first:] (a view)", lambda: seg.buf[8 * 8:])
        row("plan, 2 tensors", lambda: fused_stats.plan([a.data_ptr(), b.data_ptr()], [n, n], [0, 1], 4,
                                                        seg.buf.data_ptr(), fused_stats.BLOCK, 528, 4))
        row("torch.cuda.Event().record()", lambda: torch.cuda.Event().record())
        variant = next(iter(fused_stats._compiled.items()), None)
        if variant is not None:
            key, compiled = variant
            tab = next(iter(fused_stats._tables.values()))
            part, counters = fused_stats._scratch_for(fused_stats._stream_key(dev), dev, 1024, 64)
            stream = fused_stats._stream_key(dev)[1]
            code, vec, block = key[1], key[2], key[3]
            width = {9: 4}.get(code, 4)
            launch_args = (a.data_ptr(), tab.data_ptr(), 1, part.data_ptr(), counters.data_ptr(), seg.buf.data_ptr(),
                           seg.buf.numel() // 9, code, width, True, vec, block, fused_stats._TBLOCK,
                           fused_stats._RBLOCK)
            row("the stats kernel's direct launch alone", lambda: fused_stats._direct_launch(compiled, 1, stream,
                                                                                              launch_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
