"""Stage 1, declare: the vocabulary kernel files are written in (`space`, `api`), what
a kernel takes (`arguments`, `dims`, against the launcher's `limits`) and the registry of
ops found by scanning `ntops_aot.kernels`, each file's declarations checked when it is
loaded (`registry`)."""
