"""The dump format: schema, writer, reader."""

from .schema import FORMAT_VERSION, Record, RunInfo, Stats, canonical_op

__all__ = ["FORMAT_VERSION", "Record", "RunInfo", "Stats", "canonical_op"]
