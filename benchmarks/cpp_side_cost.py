"""The C++ runtime's host time per CUDA launch side at level stats, without a GPU.

    python benchmarks/cpp_side_cost.py [--calls 500] [--rounds 5] [--waits] [--checkout DIR]

Builds the runtime (``cpp_runtime.runtime_source``, every part inlined) into the test
harness of ``tests/fake_cuda`` with ``-O2``, against the stand-in ``libcuda.so.1`` (its
"device" memory is host memory, its kernel launch computes the stats on the CPU), and
runs the harness's ``bench`` mode: a graph call of 40 launches of a small float32 kernel
(an input the previous launch wrote, a weight, transposed at every fourth; one output),
``--calls`` times, records on disk (``--waits``: the sites defer, as codegen writes them at
level stats, and each call ends with ``call_end()``, where what waits goes as one launch).
Prints the median microseconds per side over
``--rounds`` processes. The stand-in's launch is part of it (about a third on the 2-core
CPU machine), and the real driver's calls are not (on the H100 host a side costs more:
``cpp_step.py``'s issue time). For comparing the runtime's host work between checkouts
(``--checkout``: another checkout's runtime and pack, with this checkout's harness and
stand-in driver, so one whose runtime interface and pack layout are this one's) on one
machine, alternating; ``perf record`` on the harness shows where the time goes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(checkout: str, out: str) -> str:
    """The runtime of ``checkout`` built into this checkout's harness in ``out``, with the
    stand-in driver and a pack of ``checkout``'s layout; the pack's path."""
    code = f"""
import sys, pathlib
sys.path.insert(0, {checkout!r})
from aoti_debug.codegen import cpp_runtime
from tests.test_device_stats import fake_pack
cpp_runtime.write_constants({out!r})
pathlib.Path({out!r}, "runtime.h").write_text(cpp_runtime.runtime_source(None))
print(fake_pack(pathlib.Path({out!r}, "pack.bin")))
"""
    pack = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=checkout).stdout.strip().splitlines()[-1]
    import torch

    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    fake = os.path.join(REPO, "tests", "fake_cuda")  # this checkout's harness and stand-in driver
    common = [cxx, "-std=c++17", "-O2", "-I", out, "-I", os.path.join(checkout, "aoti_debug", "codegen", "native"),
              "-I", os.path.join(os.path.dirname(torch.__file__), "include")]
    os.makedirs(os.path.join(out, "lib"), exist_ok=True)
    subprocess.run([*common, "-shared", "-fPIC", os.path.join(fake, "libcuda.cpp"), "-o",
                    os.path.join(out, "lib", "libcuda.so.1"), "-pthread"], check=True)
    subprocess.run([*common, os.path.join(fake, "harness.cpp"), "-o", os.path.join(out, "harness"), "-ldl",
                    "-pthread"], check=True)
    return pack


def once(out: str, pack: str, calls: int, waits: bool = False) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOTI_DEBUG_", "FAKE_CU_"))}
    with tempfile.TemporaryDirectory(prefix="aoti_debug_side_cost_") as dump:
        env.update(LD_LIBRARY_PATH=os.path.join(out, "lib"), AOTI_DEBUG_DIR=dump, AOTI_DEBUG_RUN_ID="run")
        cmd = [os.path.join(out, "harness"), pack, "bench", str(calls), *(["waits"] if waits else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return float(re.search(r"us_per_side=([\d.]+)", proc.stdout).group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--waits", action="store_true",
                   help="sites that defer, a call_end() a call (level stats' sides now)")
    p.add_argument("--checkout", default=None, help="another checkout to compare with, alternating")
    args = p.parse_args()
    if args.calls < 1 or args.rounds < 1:
        p.error("--calls and --rounds must be at least 1")
    checkouts = [("this", REPO)] + ([("other", os.path.abspath(args.checkout))] if args.checkout else [])
    for _name, path in checkouts:
        if not os.path.isfile(os.path.join(path, "aoti_debug", "codegen", "cpp_runtime.py")):
            print(f"cpp_side_cost.py: {path} is not a checkout of aoti_debug (no aoti_debug/codegen/cpp_runtime.py)",
                  file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="aoti_debug_side_cost_build_") as tmp:
        built = {}
        for name, path in checkouts:
            out = os.path.join(tmp, name)
            os.makedirs(out)
            built[name] = (out, build(path, out))
        times: dict[str, list[float]] = {name: [] for name, _ in checkouts}
        for _ in range(args.rounds):
            for name, (out, pack) in built.items():
                times[name].append(once(out, pack, args.calls, args.waits))
    for name, path in checkouts:
        ts = times[name]
        print(f"{name} ({path}): {statistics.median(ts):.2f} us/side median of {len(ts)} "
              f"(min {min(ts):.2f}, max {max(ts):.2f}), {80 * args.calls} sides a round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
