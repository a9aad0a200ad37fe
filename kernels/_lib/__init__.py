"""Kernel code that is not an op: the tilings of element-wise ops (`element_wise`) and
of row reductions (`reduction`), work split into parts that meet in a workspace
(`parts`), the matrix products' tile loop (`products`: mm, bmm, addmm) and flash
attention's pieces (`attention`). A package, so the registry's scan of `kernels/`
passes it by: only the modules beside it are kernel files."""
