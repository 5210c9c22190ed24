"""Compile-time side: the manager and the emitters (only codegen.inductor touches torch._inductor)."""
