"""Step-time overhead of each level on CPU, per wrapper: ours vs PyTorch's built-in printer.

A model (a small transformer, or GPT-2 from ``transformers``: 2 layers, random weights,
no download, as tests/real_models.py builds it) is compiled with ``torch.compile`` for
the C++ wrapper (``cpp_wrapper=True``) and/or the Python wrapper, once per configuration,
each in its own process (the runtimes' state is per process):

* ``base``           uninstrumented
* ``ours:<level>``   aoti_debug at save / print / names / stats (AOTI_DEBUG_SYNC off)
* ``ours:stats+ring``, ``ours:stats+trigger``  (not run by default) stats with the flight
                     recorder: AOTI_DEBUG_RING=3, and AOTI_DEBUG_TRIGGER=nonfinite too (the
                     ring is written at exit: a step is the cost of keeping it)
* ``builtin:<n>``    torch._inductor.config.aot_inductor.debug_intermediate_value_printer
                     = "1" (save), "2" (print), "3" (kernel names), aoti_debug off

All processes compile first, then run in lockstep: round after round, each process in
turn runs a few steps while the others wait, so load from anything else on the machine
falls on every configuration alike. Prints the median step time of each configuration
as a ratio to ``base`` of the same wrapper, and ours against the built-in.

    python benchmarks/overhead_cpu.py                  # transformer preset "small", cpp_wrapper
    python benchmarks/overhead_cpu.py --preset tiny --rounds 20
    python benchmarks/overhead_cpu.py --model gpt2 --wrapper python,cpp
    python benchmarks/overhead_cpu.py --model gpt2 --configs base,ours:stats --checkout /tmp/old

``--checkout DIR`` runs every configuration of another checkout too (``git archive REV |
tar -x -C DIR``), its processes in the same lockstep rounds, so that a change is judged
against its parent under the same load (rows ``this`` and ``other``).

Every process is pinned to one CPU (``--cpu``, default the first this process may use):
on a shared machine each core has its own neighbours, and a process the scheduler keeps
on the busier one is slower by up to half, whatever code it runs (seen on a shared 2-core
x86_64 machine: two processes of the same base configuration 0.565 and 0.860 ms a step).

stdout and stderr of the timed steps go to /dev/null: the terminal is not the cost.
Each step gets a new input (identical steps would let our content dedup skip every
write). A step ends when its records are written: the C++ runtime and the built-in
write in the model thread, the Python runtime's writer thread is waited for
(``aoti_debug.flush()``). The built-in writes into ``cwd/tmp/``; each process gets a
fresh working directory. On a shared 2-core machine run it with ``OMP_NUM_THREADS=1``,
or OpenMP's spin-waiting makes every number noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRESETS = {
    "tiny": dict(d=64, heads=4, layers=2, batch=2, seq=32),
    "small": dict(d=256, heads=8, layers=4, batch=4, seq=128),
}

MODELS = ("transformer", "gpt2")
CONFIGS = ["base", "ours:save", "ours:print", "ours:names", "ours:stats", "builtin:1", "builtin:2", "builtin:3"]
FLIGHT_CONFIGS = ["ours:stats+ring", "ours:stats+trigger"]

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {repo!r})
import torch
cfg, p, model_name, cpp = {cfg!r}, {preset!r}, {model!r}, {cpp!r}
out = os.fdopen(os.dup(1), "w")  # the protocol channel; everything else printed goes to the log
os.dup2(2, 1)
torch.manual_seed(0)
if model_name == "gpt2":
    from tests.real_models import BATCH, SEQ, VOCAB, gpt2
    model = gpt2().module
    new_input = lambda: torch.randint(0, VOCAB, (BATCH, SEQ))
else:
    from examples.models import Transformer
    model = Transformer(p["d"], p["heads"], p["layers"]).eval()
    new_input = lambda: torch.randn(p["batch"], p["seq"], p["d"])
import aoti_debug
patch = dict(cpp_wrapper=cpp)
if cfg.startswith("builtin:"):
    patch["aot_inductor.debug_intermediate_value_printer"] = cfg.split(":")[1]
elif cfg.startswith("ours:"):
    level, _, flight = cfg.split(":")[1].partition("+")
    if flight:  # read when the runtimes start their run
        os.environ["AOTI_DEBUG_RING"] = "3"
        if flight == "trigger":
            os.environ["AOTI_DEBUG_TRIGGER"] = "nonfinite"
    aoti_debug.enable(level)
devnull = os.open(os.devnull, os.O_WRONLY)
step = 0
with torch.no_grad(), torch._inductor.config.patch(patch):
    f = torch.compile(model)
    t0 = time.perf_counter()
    f(new_input())
    compile_s = time.perf_counter() - t0
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(devnull, 1); os.dup2(devnull, 2)
    print(json.dumps(dict(ready=True, compile_s=compile_s)), file=out, flush=True)
    for line in sys.stdin:
        n = int(line)
        if n == 0:
            break
        # A new input every step: identical steps would let the content dedup skip every write.
        xs = [new_input() for _ in range(n)]
        times = []
        for x in xs:
            t = time.perf_counter()
            f(x)
            aoti_debug.flush()  # the Python runtime's writer thread: its work is part of the step
            times.append(time.perf_counter() - t)
        step += n
        print(json.dumps(dict(times=times)), file=out, flush=True)
nbytes = 0
for root, _dirs, files in os.walk(os.getcwd()):
    nbytes += sum(os.path.getsize(os.path.join(root, n)) for n in files)
print(json.dumps(dict(bytes=nbytes, steps=step + 1)), file=out, flush=True)
"""


class Child:
    """One configuration in its own process, driven over stdin/stdout."""

    def __init__(self, cfg: str, preset: dict, model: str, wrapper: str, repo: str = REPO, checkout: str = "this"):
        self.cfg = cfg
        self.wrapper = wrapper
        self.checkout = checkout
        self.work = tempfile.mkdtemp(prefix="aoti_debug_bench_")
        env = dict(os.environ)
        env.pop("AOTI_DEBUG_LEVEL", None)
        env.pop("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER", None)
        env.pop("AOTI_DEBUG_RING", None)
        env.pop("AOTI_DEBUG_TRIGGER", None)
        env["AOTI_DEBUG_DIR"] = os.path.join(self.work, "dump")
        if cfg.startswith("builtin:"):
            # The built-in bakes cwd/tmp/jit_inductor/ into its wrapper as an absolute path:
            # one from Inductor's cache names an earlier process's (deleted) directory.
            env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
        code = _CHILD.format(repo=repo, cfg=cfg, preset=preset, model=model, cpp=wrapper == "cpp")
        self.log = open(os.path.join(self.work, "child.log"), "w")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=self.work, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.times: list[float] = []

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.log.flush()
            with open(self.log.name) as f:
                raise RuntimeError(f"{self.cfg} failed:\n{f.read()[-4000:]}")
        return json.loads(line)

    def run(self, n: int) -> None:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        self.times.extend(self.read()["times"])

    def finish(self) -> dict:
        self.proc.stdin.write("0\n")
        self.proc.stdin.flush()
        info = self.read()
        self.proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)
        return info


def save_json(path: str, results: dict, args: argparse.Namespace, command: list[str], pinned: list[int],
              torch_version: str) -> None:
    """This checkout's rows as ``benchmarks/saved_runs.py`` writes a run (no back-to-back
    time or compile time here: lockstep steps only)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import saved_runs

    rows = []
    for (label, wrapper, cfg), r in results.items():
        if label != "this":
            continue
        kind, _, level = cfg.partition(":")
        rows.append(saved_runs.row(
            model=args.model if args.model == "gpt2" else f"transformer-{args.preset}", wrapper=wrapper,
            mode="default", level=saved_runs.level_of(level if kind == "ours" else None,
                                                        level if kind == "builtin" else None),
            step_s=r["median"], bytes_per_step=r["bytes"] / r["steps"]))
    env = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in ("OMP_NUM_THREADS", "PYTHONPATH") if k in os.environ)
    saved_runs.write(path, tool="overhead_cpu.py", command=" ".join(filter(None, [env, shlex.join(command)])),
                       machine=f"CPU, {os.cpu_count()} cores (runs on {pinned})", torch_version=torch_version,
                       rows=rows, extra=dict(rounds=args.rounds, steps=args.steps))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=MODELS, default="transformer")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small", help="the transformer's size")
    ap.add_argument("--wrapper", default="cpp", help="comma-separated: cpp, python")
    ap.add_argument("--rounds", type=int, default=10, help="lockstep rounds")
    ap.add_argument("--steps", type=int, default=3, help="steps per configuration per round")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated subset of " + ", ".join(CONFIGS + FLIGHT_CONFIGS))
    ap.add_argument("--cpu", type=int, default=None,
                    help="the CPU every process runs on (default: the first this process may use; -1: not pinned)")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the run (command, machine, a row per config of this checkout) to PATH as "
                         "JSON: what benchmarks/readme_table.py builds the README's table from")
    ap.add_argument("--checkout", default=None,
                    help="another checkout whose configurations run in the same lockstep rounds (rows 'other')")
    args = ap.parse_args(argv)
    if args.checkout is not None and not os.path.isdir(os.path.join(args.checkout, "aoti_debug")):
        ap.error(f"--checkout: {args.checkout!r} holds no aoti_debug package")
    unknown = set(args.configs.split(",")) - set(CONFIGS + FLIGHT_CONFIGS)
    if unknown:
        ap.error(f"--configs: unknown {', '.join(sorted(unknown))}")
    preset = PRESETS[args.preset]
    if args.cpu != -1 and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0)) if args.cpu is None else args.cpu
        try:
            os.sched_setaffinity(0, {cpu})  # the children inherit it
        except OSError as e:
            ap.error(f"--cpu {cpu}: {e}")
    wrappers = args.wrapper.split(",")
    if not set(wrappers) <= {"cpp", "python"}:
        ap.error(f"--wrapper: cpp and/or python, not {args.wrapper!r}")
    import torch

    what = "GPT-2 (transformers, 2 layers)" if args.model == "gpt2" else f"transformer {preset}"
    pinned = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(f"torch {torch.__version__}, wrappers {', '.join(wrappers)}, CPU ({os.cpu_count()} cores; runs on {pinned}), "
          f"{what}, {args.rounds} rounds x {args.steps} steps, one warm-up round", flush=True)
    checkouts = [("this", REPO)] + ([("other", os.path.abspath(args.checkout))] if args.checkout else [])
    children = []
    try:
        for wrapper in wrappers:
            for cfg in args.configs.split(","):
                for label, repo in checkouts:
                    child = Child(cfg, preset, args.model, wrapper, repo, label)
                    info = child.read()  # compiles one at a time
                    name = f"{cfg} ({label})" if args.checkout else cfg
                    print(f"  compiled {wrapper:<6} {name:<18} in {info['compile_s']:6.1f} s", flush=True)
                    children.append(child)
        for c in children:  # warm-up round, not timed
            c.run(args.steps)
            c.times.clear()
        for _ in range(args.rounds):
            for c in children:
                c.run(args.steps)
        results: dict[tuple[str, str, str], dict] = {}
        for c in children:
            info = c.finish()
            results[c.checkout, c.wrapper, c.cfg] = dict(median=statistics.median(c.times), bytes=info["bytes"],
                                                         steps=info["steps"])
    finally:
        for c in children:
            if c.proc.poll() is None:
                c.proc.kill()
    print()
    print(f"{'wrapper':<8} {'config':<18} {'checkout':<9} {'ms/step':>9} {'x base':>8} {'MB/step':>9}")
    for (label, wrapper, cfg), r in results.items():
        base = results.get((label, wrapper, "base"))
        ratio = r["median"] / base["median"] if base else float("nan")
        print(f"{wrapper:<8} {cfg:<18} {label:<9} {r['median'] * 1e3:9.3f} {ratio:8.2f} "
              f"{r['bytes'] / r['steps'] / 1e6:9.2f}")
    print()
    if args.json:
        script = os.path.relpath(os.path.abspath(__file__), os.getcwd())
        save_json(args.json, results, args, [os.path.basename(sys.executable), script,
                                             *(sys.argv[1:] if argv is None else argv)], pinned, torch.__version__)
    pairs = [("ours:save", "builtin:1"), ("ours:print", "builtin:2"), ("ours:stats", "builtin:2"),
             ("ours:names", "builtin:3")]
    for wrapper in wrappers:
        for ours, theirs in pairs:
            a, b = results.get(("this", wrapper, ours)), results.get(("this", wrapper, theirs))
            if a and b:
                print(f"{wrapper:<8} {ours:<11} is {b['median'] / a['median']:6.2f}x the speed of {theirs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
