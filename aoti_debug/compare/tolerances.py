"""The check every comparison's tolerances pass before any value is compared."""

from __future__ import annotations

import math

from ..errors import ToleranceError

__all__ = ["check_tolerances"]


def check_tolerances(atol: float | None = None, rtol: float | None = None,
                     rounding_factor: float | None = None) -> None:
    """Raise :class:`ToleranceError` unless each tolerance given is a finite number >= 0
    and the factor a finite number > 0 (None: the default, not checked).

    NaN compares false with everything: ``|a - b| > atol + rtol * |b|`` never holds, so a
    NaN tolerance would pass any two runs; a negative one fails equal values.
    """
    for name, value, low in (("atol", atol, 0.0), ("rtol", rtol, 0.0), ("rounding_factor", rounding_factor, None)):
        if value is None:
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ToleranceError(f"{name} must be a number, not {value!r}") from None
        if not math.isfinite(v) or (v < low if low is not None else v <= 0):
            want = "a finite number >= 0" if low is not None else "a finite number > 0"
            raise ToleranceError(f"{name} must be {want}, not {value!r}")
