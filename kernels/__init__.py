"""Kernel definitions: one file per op, each with `arrangement`, `application`,
`premake` and the op's variant space `SPACE`. Code several ops share lives in the
`_lib` package (tilings, the product loop, attention's pieces), and tuning policy in
`tuning` beside its tables. The build discovers ops by scanning this package's
modules; nothing keeps a list of them by hand."""
