"""How kernels are built, one module per stage:
enumerate -> codegen -> compile -> render -> package (build.py runs them in order)."""
