"""Tuning policy beside its tables: per family of ops, the configurations worth
building, the buckets of call sizes a launcher tells apart (with the calls a tuning run
times in each), each bucket's declared default and the candidates a tuning run tries
(`products`: mm, bmm, addmm; `attention`: scaled_dot_product_attention). `<arch>.json`
holds the winners a tuning run found on that arch (aot/plan/tuning.py reads them). A
package, so the registry's scan of `kernels/` passes it by."""
