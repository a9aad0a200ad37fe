"""Kernel definitions: one file per op, each with `arrangement`, `application`,
`premake` and the op's variant space `SPACE`. Files without a `SPACE` hold tilings
shared by several ops (`element_wise`, `reduction`). The build discovers ops by
scanning this package; nothing keeps a list of them by hand."""
