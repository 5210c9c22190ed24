"""Replay one launch of a compiled run on a reference's inputs, and cut it out as a repro.

:func:`replay` names the kernel where an error is born (``culprit``) and those that
only pass it on (``propagator``); :func:`write_repro` writes a launch as a directory
that reproduces it with torch alone. Both run the launch's own generated code, cut out
of the wrapper that the dump names (:mod:`.program`): that is code from the Inductor
cache of the machine that recorded the run, so replay dumps that you recorded.
"""

from .engine import AGREES, CULPRIT, PROPAGATOR, UNJUDGED, LaunchReplay, ReplayResult, replay
from .program import Program, ReplayError, program

__all__ = ["AGREES", "CULPRIT", "PROPAGATOR", "UNJUDGED", "LaunchReplay", "Program", "ReplayError",
           "ReplayResult", "program", "replay"]
