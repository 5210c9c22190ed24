"""Outputs that are nondeterministic by contract (RNG seeds and offsets, random values),
read from op schemas so that a diff never reports them as divergence."""

from __future__ import annotations

from typing import Any

import torch

from .launch import LaunchArg

#: Return names that carry RNG state or nothing at all, whatever the inputs: the seeds
#: and offsets of the SDPA variants (efficient, flash, cuDNN; torch 2.11 and 2.13 schemas).
_VOLATILE_RETURNS = {
    "philox_seed": "RNG seed",
    "philox_offset": "RNG offset",
    "rng_state": "RNG state",
    "unused": "unused output",
    "debug_attn_mask": "debug output (filled only with return_debug_mask)",
}


def volatile_returns(op: Any) -> dict[int, str]:
    """Positions of ``op``'s returns that are nondeterministic by contract, with why.

    Named RNG returns (``philox_seed``...) are volatile; an op tagged
    ``nondeterministic_seeded`` whose returns have no names (``randint`` making
    Inductor's dropout seeds, ``rand``, ``bernoulli``) returns random values throughout.
    """
    if not isinstance(op, torch._ops.OpOverload):
        return {}
    returns = op._schema.returns
    name = f"{op.namespace}.{op._schema.name.split('::')[-1]}"
    out = {i: f"{_VOLATILE_RETURNS[r.name]} of {name}" for i, r in enumerate(returns) if r.name in _VOLATILE_RETURNS}
    if not out and torch.Tag.nondeterministic_seeded in op.tags and not any(r.name for r in returns):
        out = {i: f"random values of {name} (nondeterministic_seeded)" for i in range(len(returns))}
    return out


def mark_volatile(args: list[LaunchArg], op: Any, tuple_output: bool) -> None:
    """Put the volatile returns of ``op`` on its output args: one arg per return (C++,
    named ``buf7[2]``), or one arg holding the returned tuple (Python, ``buf7``)."""
    volatile = volatile_returns(op)
    if not volatile:
        return
    outputs = [a for a in args if a.role == "output"]
    for a in outputs:
        if "[" in a.name:
            pos = a.name[a.name.index("[") + 1 : a.name.index("]")]
            if pos.isdigit() and int(pos) in volatile:
                a.volatile = (("", volatile[int(pos)]),)
        elif tuple_output:
            a.volatile = tuple((f"[{i}]", why) for i, why in sorted(volatile.items()))
        elif 0 in volatile:
            a.volatile = (("", volatile[0]),)
