"""What generated code calls at run time. Light: no pandas, click, codegen or compare."""

from .session import FAILURES, dump_path, failures, flush, reset

__all__ = ["FAILURES", "dump_path", "failures", "flush", "reset"]
