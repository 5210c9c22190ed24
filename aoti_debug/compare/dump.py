"""A run opened for analysis: the streaming reader plus pandas views and a summary."""

from __future__ import annotations

import os

from ..format.reader import RunReader


class Dump(RunReader):
    """One run of a dump (see :class:`aoti_debug.format.reader.RunReader`).

    ``records()`` streams the manifest, ``load_tensor(record)`` memory-maps one
    tensor file, ``to_frame()`` tabulates the manifest, ``summary()`` is what
    ``aoti-debug show`` prints.
    """

    def to_frame(self):
        """The manifest as a DataFrame, one row per record, stats flattened (``stats.min`` ...)."""
        import pandas as pd

        rows = []
        for r in self.records():
            d = r.to_dict()
            stats = d.pop("stats", None) or {}
            for k, v in stats.items():
                d[f"stats.{k}"] = v
            rows.append(d)
        return pd.DataFrame(rows)

    def summary(self):
        from .show import summarize_run

        return summarize_run(self)

    def __str__(self) -> str:
        return f"{self.name} at {self.path} (level {self.info.level or '?'}, writer {self.info.writer})"


def load_dump(path: str | os.PathLike) -> Dump:
    """Open the run at ``path``: a run directory, or a dump root holding exactly one run.

    Raises:
        DumpError: missing path, not a dump, several runs (they are named).
        FormatVersionError: written by a newer dump format.
    """
    return Dump(os.fspath(path))
