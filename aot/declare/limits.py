"""What the launcher's tables hold at most (generated.h is rendered with these), so
that a kernel file asking for more is refused when it is loaded, not after it has
compiled. Attention with a KV cache's new entries and a causal offset takes 9
arguments and names 7 dims; paged attention (FlashAttention's layouts: packed or paged
keys, a page table, lengths, new entries, the log-sum-exp) 24 arguments and 98 Triton
parameters, 26 over an FP8 cache (its two scales). Bit masks per argument are 32 bits
(ntops.h's `aligned`, core.h's `has_given`). Only the first 64 / NT_MAX_DIMS arguments
can be specialised (their properties are bits of one 64-bit word per kind): later ones
are tables and scalars."""

NT_MAX_DIMS = 8  # of one tensor
NT_MAX_ARGS = 28  # of one kernel; at most 32 (the masks' bits)
NT_MAX_PARAMS = 128  # Triton parameters of one kernel
NT_SPECIALIZED_ARGS = 64 // NT_MAX_DIMS  # arguments whose dims may be specialised
NT_MAX_NAMES = 12  # named dims of one group (SPACE.dims)
NT_MAX_FACTORS = 4  # names of one derived dim ("heads_q/heads_kv*seq_q")
