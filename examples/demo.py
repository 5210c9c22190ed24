"""The main job on an embedded default (``make demo``).

Compiles a small transformer with ``torch.compile``, runs it at level ``save`` twice
(once as is, once with one weight perturbed), then shows each dump and diffs them:
the diff names the first kernel whose output diverges while its inputs still match.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aoti_debug  # noqa: E402
from examples.models import Transformer  # noqa: E402


def cli(*args: str) -> int:
    """Run the aoti-debug CLI in a child process, as a user would."""
    cmd = [sys.executable, "-m", "aoti_debug.cli", *args]
    print("$ aoti-debug " + " ".join(args), flush=True)
    return subprocess.run(cmd).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where to keep the two dumps (default: a temp dir)")
    args = parser.parse_args()
    root = args.out or tempfile.mkdtemp(prefix="aoti_debug_demo_")
    if os.path.exists(os.path.join(root, "a")):
        shutil.rmtree(os.path.join(root, "a"))
        shutil.rmtree(os.path.join(root, "b"), ignore_errors=True)

    torch.manual_seed(0)
    model = Transformer(d=64, heads=4, layers=2).eval()
    x = torch.randn(2, 16, 64)
    compiled = torch.compile(model)

    with torch.no_grad():
        with aoti_debug.enabled(level="save", dump_dir=os.path.join(root, "a")):
            out_a = compiled(x)
        # Perturb one weight: the second block's MLP input projection.
        model.blocks[1].fc1.weight.data[0, 0] += 0.5
        with aoti_debug.enabled(level="save", dump_dir=os.path.join(root, "b")):
            out_b = compiled(x)
    print(f"run a and run b differ by up to {(out_a - out_b).abs().max().item():.3g} at the output")
    print(f"dumps under {root}\n", flush=True)

    cli("show", os.path.join(root, "a"))
    code = cli("diff", os.path.join(root, "a"), os.path.join(root, "b"))
    # diff exits 1 when the runs differ, which is what this demo expects.
    return 0 if code == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
