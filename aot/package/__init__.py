"""Stage 4, package: a `Plan` and its `Compiled` -> the wheel(s) (`stage.write_wheels`)
or a shard file (`shards`): the launcher's tables rendered (`render`) and compiled,
the manifest, the generated Python (`exports`), the zip (`archive`, `wheel`)."""
