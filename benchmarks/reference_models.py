"""Compiled vs eager and fp64 references on the transformers models of the test suite.

    python benchmarks/reference_models.py [--models gpt2,llama,bert,resnet] [--wrappers python,cpp] [--bug]

For each (model, wrapper): compile at level ``save``, record the eager and the fp64
reference of the same compiled function, and diff. Prints the exit codes, how many of
the compiled run's outputs were paired, and the largest compiled/eager error ratio
against float64. ``--bug`` makes Inductor's ``aten.tanh`` lowering 1e-4 too large
(caches off) and prints the first divergence instead. Dumps go under a temporary
directory (``--dir`` to keep them).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

import aoti_debug  # noqa: E402
from tests.conftest import only_run  # noqa: E402
from tests.real_models import BUILDERS  # noqa: E402
from tests.test_reference import wrong_tanh  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(BUILDERS))
    p.add_argument("--wrappers", default="python,cpp")
    p.add_argument("--bug", action="store_true", help="inject the tanh lowering bug into the compiled run")
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="aoti_debug_reference_")
    for name in args.models.split(","):
        model = BUILDERS[name]()
        for wrapper in args.wrappers.split(","):
            base = os.path.join(root, f"{name}-{wrapper}")
            torch._dynamo.reset()
            fn = torch.compile(model.module, options={"cpp_wrapper": wrapper == "cpp"})
            refs = {}
            for mode, dtype in (("eager", None), ("fp64", torch.float64)):
                with torch.no_grad(), aoti_debug.reference(dtype=dtype, dump_dir=f"{base}/{mode}"):
                    fn(*model.inputs)
                refs[mode] = only_run(f"{base}/{mode}")
            torch._dynamo.reset()
            bug = wrong_tanh() if args.bug else torch._inductor.config.patch({})
            with bug, torch.no_grad(), aoti_debug.enabled(level="save", dump_dir=f"{base}/compiled"):
                torch.compile(model.module, options={"cpp_wrapper": wrapper == "cpp"})(*model.inputs)
            compiled = only_run(f"{base}/compiled")
            for mode, ref in refs.items():
                r = aoti_debug.diff(compiled, ref, keep_all=True)
                outs = [rc for rc in r.compared if rc.a is not None and rc.a.phase == "after"]
                paired = sum(1 for rc in outs if rc.status != "unpaired")
                ratios = [rc.ratio for rc in r.compared if rc.ratio is not None and math.isfinite(rc.ratio)]
                line = f"{name:7s} {wrapper:6s} vs {mode:5s}: exit {r.exit_code}, outputs paired {paired}/{len(outs)}"
                if ratios:
                    line += f", max ratio {max(ratios):.3g}"
                print(line, flush=True)
                if r.first_divergence is not None:
                    print(f"    first divergence: {r.first_divergence}")
    print(f"dumps under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
