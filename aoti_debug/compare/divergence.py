"""Finding the launch where two runs part ways, while the launches stream past.

Launches are seen in run A's launch order. The first divergence is the earliest
launch with an output (an ``after`` record: output or in-place arg) that differs:

* ``born`` when every input it read (``before`` records, in-place args included)
  still matches: the launch itself made the difference;
* ``input`` when some input already differs. No earlier launch wrote a differing
  output (this one is the earliest), so that input came from outside the
  instrumented code: a graph input, a weight, or a buffer changed by an
  uninstrumented kernel. This is where a perturbed weight or a planted NaN enters.

Pairs that could not be compared (missing counterpart, unreadable file) neither
make nor break a launch. If no output ever differs but some input does (a dump
with ``before`` records only, or a difference that a launch absorbed), the first
launch with a differing input is named, as ``input``.
"""

from __future__ import annotations

from .align import PairedLaunch
from .result import FirstDivergence, RecordComparison


class DivergenceFinder:
    """Feed it each launch's comparisons in A's order; :attr:`first` holds the answer."""

    def __init__(self):
        self._first: FirstDivergence | None = None
        self._fallback: FirstDivergence | None = None
        self._fallback_rows: list[RecordComparison] = []

    @property
    def first(self) -> FirstDivergence | None:
        return self._first or self._fallback

    @property
    def done(self) -> bool:
        return self._first is not None

    def observe(self, launch: PairedLaunch, rows: list[RecordComparison]) -> bool:
        """Look at one launch; True when it is the first divergence (rows get marked)."""
        if self._first is not None or launch.launch_a is None:
            return False
        bad_in = [r for r in rows if r.failed and r.a is not None and r.a.phase == "before"]
        bad_out = [r for r in rows if r.failed and r.a is not None and r.a.phase == "after"]
        if not bad_out:
            if bad_in and self._fallback is None:
                self._fallback = self._make(launch, "input", [], bad_in)
                self._fallback_rows = bad_in
                for r in bad_in:
                    r.first = True
            return False
        for r in self._fallback_rows:
            r.first = False
        self._fallback, self._fallback_rows = None, []
        self._first = self._make(launch, "input" if bad_in else "born", bad_out, bad_in)
        for r in bad_out + bad_in:
            r.first = True
        return True

    @staticmethod
    def _make(launch: PairedLaunch, kind: str, bad_out: list, bad_in: list) -> FirstDivergence:
        worst = [r.metrics.max_abs for r in bad_out if r.metrics is not None and r.metrics.max_abs is not None]
        ratios = [r.ratio for r in bad_out if r.ratio is not None]
        verdicts = [r.verdict for r in bad_out if r.verdict is not None]
        return FirstDivergence(
            launch=launch.launch_a or 0, launch_b=launch.launch_b, graph=launch.graph, kernel=launch.kernel,
            op=launch.op, kernel_call=launch.kernel_call, kind=kind,
            outputs=[r.arg for r in bad_out], inputs=[r.arg for r in bad_in],
            max_abs=max(worst) if worst else None,
            verdict=verdicts[0] if verdicts else None, ratio=max(ratios) if ratios else None,
        )
