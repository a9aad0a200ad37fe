"""The compilers: ninetoothed and Triton loaded in a process for a target arch
(`compilers`, the arches they build for in `targets`), ninetoothed's internals behind
one adapter, and the versions of it all."""
