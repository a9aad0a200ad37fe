"""What the launcher's tables hold at most (generated.h is rendered with these), so
that a kernel file asking for more is refused when it is loaded, not after it has
compiled. Attention with a KV cache's new entries and a causal offset takes 9
arguments and names 7 dims."""

NT_MAX_DIMS = 8  # of one tensor
NT_MAX_ARGS = 12  # of one kernel
NT_MAX_PARAMS = 64  # Triton parameters of one kernel
NT_MAX_NAMES = 12  # named dims of one group (SPACE.dims)
NT_MAX_FACTORS = 4  # names of one derived dim ("heads_q/heads_kv*seq_q")
