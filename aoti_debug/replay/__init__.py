"""Replay one launch of a compiled run on a reference's inputs, and cut it out as a repro.

:func:`replay` names the kernel where an error is born (``culprit``) and those that
only pass it on (``propagator``); :func:`write_repro` writes a launch as a directory
that reproduces it with torch alone. Both run the launch's own generated code, cut out
(:mod:`.program`) of the copy of the wrapper that the run directory keeps, checked
against its recorded sha256 (:mod:`.trust`); nothing else a dump says is ever code
(:mod:`.safe`). A dump of another user or machine runs only with ``trust``.
"""

from .engine import AGREES, CULPRIT, PROPAGATOR, UNJUDGED, LaunchReplay, ReplayResult, replay
from .program import Program, ReplayError, program
from .trust import Sources

__all__ = ["AGREES", "CULPRIT", "PROPAGATOR", "UNJUDGED", "LaunchReplay", "Program", "ReplayError",
           "ReplayResult", "Sources", "program", "replay"]
