"""Entry point for torch's ``torch.backends`` autoload (runs inside ``import torch``).

Must cost nothing when AOTI_DEBUG_LEVEL is unset: one environment lookup, no imports.
"""


def autoload() -> None:
    import os

    if not (os.environ.get("AOTI_DEBUG_LEVEL") or os.environ.get("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER")):
        return
    from ._switch import install_from_env_when_ready

    install_from_env_when_ready()
