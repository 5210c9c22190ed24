"""What generated code calls at run time. Light: no pandas, click, codegen or compare."""

from .session import FAILURES, dump_path, flush, reset

__all__ = ["FAILURES", "dump_path", "flush", "reset"]
