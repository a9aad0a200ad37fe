"""The build cache: content-addressed entries (`cache`) under keys that cover every
source file a product depends on (`fingerprint`)."""
