"""Named exceptions of aoti_debug. The CLI turns each into a one-line error (exit 2)."""

from __future__ import annotations


class AotiDebugError(Exception):
    """Base class: every error the library raises on bad input."""


class ConfigError(AotiDebugError):
    """An environment variable or argument has a value we cannot use."""


class ToleranceError(ConfigError, ValueError):
    """A tolerance or factor is NaN, infinite or negative: every comparison against it
    would come out one way whatever the values (NaN: nothing ever exceeds it)."""


class DumpError(AotiDebugError):
    """A dump path is missing, is not a dump, or is damaged."""


class FormatVersionError(DumpError):
    """The dump was written by a newer format version than this reader knows."""


class RecordError(DumpError):
    """One record (a manifest line or its tensor file) cannot be used."""


class UnsupportedTorchError(AotiDebugError):
    """The installed torch lacks an Inductor hook that aoti_debug needs."""


class PlotError(AotiDebugError):
    """A picture cannot be drawn: matplotlib is missing, the file suffix names no
    format we draw, or the file cannot be written."""
