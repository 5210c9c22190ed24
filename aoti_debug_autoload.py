"""Entry point for torch's ``torch.backends`` autoload (runs inside ``import torch``).

A top-level module of its own, so that when AOTI_DEBUG_LEVEL is unset the autoload
costs one environment lookup and does not even import the ``aoti_debug`` package.
"""


def autoload() -> None:
    import os

    if not (os.environ.get("AOTI_DEBUG_LEVEL") or os.environ.get("AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER")):
        return
    from aoti_debug._switch import install_from_env_when_ready

    install_from_env_when_ready()
