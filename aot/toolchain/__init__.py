"""The compilers: ninetoothed and Triton loaded in a process for a target arch
(`compilers`), ninetoothed's internals behind one adapter, and the versions of it all."""
