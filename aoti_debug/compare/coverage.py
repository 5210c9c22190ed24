"""What a diff looked at: the values run A materialised, how many were compared, why the
rest were not, and the modules where none was.

    compared 43 of 183 values run A materialised (140 not: 61 steps inside a node's
    computation, 52 not in run B, 27 read again); nothing compared in: model.layers.1.mlp

A value is an ``after`` record of a tensor in run A (what a launch wrote). A diff that
says EQUAL while a module made values and none of them was compared, neither in it nor
in its submodules, has not looked there: :attr:`Coverage.blind` names those modules, and the diff is then not EQUAL
(:attr:`aoti_debug.compare.result.DiffResult.exit_code`).
"""

from __future__ import annotations

import collections
import dataclasses

from ..format.reader import RunReader
from .result import RecordComparison

#: Why a value was not compared, by the start of its pair's note (compare/value_align.py
#: words them) or its status; the first match names it.
_REASONS = (
    ("made on the way to", "steps inside a node's computation"),
    ("made before the value of", "earlier values of a node compared later"),
    ("read again by", "read again"),
    ("the launch has more than one value", "values of one node that cannot be told apart"),
    ("the two runs made", "values the runs made a different number of times"),
)
_STATUS_REASONS = {"volatile": "volatile (RNG seeds and offsets)", "uninitialised": "uninitialised memory",
                   "ignored": "ignored (--ignore)", "only_a": "not in run B", "unpaired": "not in run B",
                   "error": "unreadable", "mismatch": "of another shape or dtype in run B"}
#: Statuses of a value that was compared.
COMPARED = ("pass", "fail")
#: Statuses of values nobody expects compared: a module made only these has nothing to see.
_NOTHING_TO_SEE = ("volatile", "uninitialised", "ignored")
#: Reasons of values on the way to a node's value that is compared where it is made (in
#: this launch or a later one): a module made only these is seen through that value.
_SEEN_LATER = ("steps inside a node's computation", "earlier values of a node compared later")


def reason(rc: RecordComparison) -> str:
    """Why the value of ``rc`` was not compared, in a few words."""
    if rc.status == "unpaired":
        for start, words in _REASONS:
            if rc.note.startswith(start):
                return words
    return _STATUS_REASONS.get(rc.status, rc.status)


@dataclasses.dataclass
class Coverage:
    """Counts of run A's materialised values, compared or not, overall and per module."""

    values: int = 0
    compared: int = 0
    not_compared: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    """Reason -> how many values were not compared for it."""
    modules: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """Module path -> [values, compared, values there was something to see in: compared, or
    not compared for want of a counterpart (not a step on the way to a compared value)]."""

    @property
    def blind(self) -> list[str]:
        """Modules that made values worth comparing and had none compared, in them or in
        their submodules, in the order first seen. (An attention module whose own values
        fused differently is still looked at through its projections: what it computes
        flows into their compared values.)"""
        looked = [m for m, (_n, done, _s) in self.modules.items() if done]
        return [m for m, (_n, done, seeable) in self.modules.items()
                if seeable and not done and not any(x.startswith(m + ".") for x in looked)]

    def line(self) -> str:
        """``compared 43 of 183 values run A materialised (140 not: ...)``."""
        text = f"compared {self.compared} of {self.values} values run A materialised"
        missed = self.values - self.compared
        if missed:
            parts = ", ".join(f"{n} {why}" for why, n in self.not_compared.most_common())
            text += f" ({missed} not: {parts})"
        return text

    def blind_line(self, most: int = 8) -> str:
        """``nothing compared in: a, b, ... (and N more)``, or "" when every module was looked at."""
        blind = self.blind
        if not blind:
            return ""
        more = f" (and {len(blind) - most} more)" if len(blind) > most else ""
        return "nothing compared in: " + ", ".join(blind[:most]) + more

    def to_dict(self) -> dict:
        return {"values": self.values, "compared": self.compared, "not_compared": dict(self.not_compared),
                "blind_modules": self.blind,
                "modules": {m: {"values": n, "compared": c} for m, (n, c, _s) in self.modules.items()}}


class CoverageCounter:
    """Counts each compared launch's rows into a :class:`Coverage` (module paths from run
    A's provenance, looked up once per launch site)."""

    def __init__(self, reader: RunReader):
        self.reader = reader
        self.coverage = Coverage()
        self._modules: dict[tuple, str] = {}

    def _module(self, rc: RecordComparison) -> str:
        a = rc.a
        key = (a.graph, a.site, a.arg)
        module = self._modules.get(key)
        if module is None:
            prov = self.reader.provenance(a)
            value = prov.output(a.arg) if prov is not None else None
            module = (value.module if value is not None and value.module else
                      prov.module if prov is not None else "") or "(no module)"
            self._modules[key] = module
        return module

    def add(self, rows: list[RecordComparison]) -> None:
        cov = self.coverage
        for rc in rows:
            a = rc.a
            if a is None or a.phase != "after" or a.kind != "tensor":
                continue
            cov.values += 1
            entry = cov.modules.setdefault(self._module(rc), [0, 0, 0])
            entry[0] += 1
            if rc.status in COMPARED:
                cov.compared += 1
                entry[1] += 1
                entry[2] += 1
                continue
            why = reason(rc)
            cov.not_compared[why] += 1
            if rc.status not in _NOTHING_TO_SEE and why not in _SEEN_LATER:
                entry[2] += 1
