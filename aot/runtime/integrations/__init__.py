"""Frameworks' models on the wheel's kernels, one module per framework. Each imports its
framework only when it is itself imported: `import ntops_prebuilt` never does."""
