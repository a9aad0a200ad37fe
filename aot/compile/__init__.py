"""Stage 3, compile: a `Plan` -> its `Compiled` kernels (`stage.compile_all`): per
variant ninetoothed's code generation (`codegen`), then Triton (`cubins`), in worker
processes (`workers`), each variant stored as it finishes."""
