"""Compile-time side: the manager, the emitters and the Inductor patch table (only this package touches torch._inductor; inductor.py is its public face)."""
