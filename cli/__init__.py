"""The `ntops-aot` command: a thin click adapter over ntops_aot.aot."""
