/* The kernel tables (kernels.c, generated) and their types, shared by the core of the
 * launcher (core.h), the driver layer (driver.h) and the Python binding (binding.h).
 * Nothing here needs Python. */
#ifndef NTOPS_H
#define NTOPS_H

#include <stddef.h>
#include <stdint.h>

#include "generated.h" /* NT_MAX_ARGS, NT_MAX_DIMS, NT_MAX_PARAMS, NT_MAX_NAMES, ... */

#define NT_MAX_DTYPES 16

/* Sizes and strides are stored right-aligned in arrays of NT_MAX_DIMS: a kernel
 * of ndim n reads dim d at NT_DIM(n, d). Coalesced tensors thereby fit kernels
 * with more dims (the leading ones get size 1, stride 0) without copying. */
#define NT_DIM(n, d) (NT_MAX_DIMS - (n) + (d))
/* Bit of an (argument, stored dim) pair in the property masks below. */
#define NT_BIT(arg, pos) (UINT64_C(1) << ((arg) * NT_MAX_DIMS + (pos)))

enum nt_param_kind { NT_POINTER, NT_SIZE, NT_STRIDE, NT_SCALAR, NT_WORKSPACE, NT_LAUNCH };
enum nt_param_type { NT_I1, NT_I32, NT_I64, NT_F32, NT_F64, NT_PTR };
enum nt_coalesce { NT_COALESCE_ALL, NT_COALESCE_LEADING, NT_COALESCE_NONE };
/* NT_FIXED: not coalesced (stored at its own ndim); NT_BROADCAST: an input that
 * broadcasts to its named dims, read with stride 0 where it has size 1 or no dim;
 * NT_DESCRIBED: an input some kernels read through TMA descriptors, which cannot step
 * a dim by 0 bytes (SPACE.descriptors). */
enum nt_arg_flags {
    NT_TENSOR = 1,
    NT_OUTPUT = 2,
    NT_FIXED = 4,
    NT_BROADCAST = 8,
    NT_DESCRIBED = 16
};

typedef struct nt_call nt_call;
typedef int64_t (*nt_grid_fn)(const nt_call *call);

typedef struct {
    uint8_t kind; /* enum nt_param_kind */
    uint8_t arg;  /* which argument of the call */
    uint8_t dim;  /* stored position (NT_DIM) for sizes and strides */
    uint8_t type; /* enum nt_param_type */
} nt_param;

/* What a kernel assumes; a call qualifies when it has every property needed. */
typedef struct {
    uint64_t unit;     /* stride == 1 (compiled as a constant) */
    uint64_t size16;   /* size % 16 == 0 */
    uint64_t stride16; /* stride % 16 == 0 */
    uint32_t aligned;  /* bit per argument: data pointer % 16 bytes == 0 */
} nt_props;

typedef struct {
    const char *id;             /* "add-sm_90-fp32-nd1/i32-u000-a16" */
    const char *function;       /* entry point in the cubin */
    const unsigned char *cubin; /* or, for a PTX kernel, NUL-terminated PTX */
    uint16_t capability;        /* 90 */
    uint8_t exact;              /* an "a" target: runs on that capability only */
    uint8_t ptx;                /* PTX (built with --ptx): the driver JIT-compiles it */
    uint8_t dtype;              /* index into nt_dtypes */
    uint8_t ndim;               /* of the coalesced tensors; 0 for ops that do not coalesce */
    uint8_t width;              /* 32 or 64: type of sizes and strides */
    uint16_t num_warps;         /* as compiled (warp specialisation adds warps) */
    uint8_t num_ctas;           /* programs per cluster; 1: no cluster */
    uint32_t shared;            /* bytes of dynamic shared memory */
    uint32_t scratch; /* bytes of global scratch per program (device-side TMA descriptors) */
    uint32_t scratch_align;
    uint32_t workspace;        /* bytes of workspace per program the launcher allocates */
    uint32_t workspace_zeroed; /* of them, zeroed (per program, from the start) */
    int64_t bucket[2][2];      /* the calls it serves: its group's key sizes k in [low, high] */
    uint16_t candidate;        /* tuning wheels: which candidate of its bucket it was built with */
    nt_props needs;
    nt_grid_fn grid;
    uint8_t num_params; /* runtime parameters; then num_scratch pointers (global, profile) */
    uint8_t num_scratch;
    nt_param params[NT_MAX_PARAMS];
} nt_kernel;

typedef struct {
    const char *name; /* the application parameter: "input", "other", "output", ... */
    uint8_t flags;    /* enum nt_arg_flags; 0 for a scalar */
    uint8_t ndim;     /* for tensors that are not coalesced */
    int8_t dtype;     /* -1: the call's dtype; else the index of its own (bool results) */
    /* Fixed tensors: each dim's name (an index into the group's names; -1: unnamed), in
     * the tensor's own order; coalesced ones: the names of their trailing dims, then
     * -1s. Dims of one name have one size in a call. */
    int8_t dims[NT_MAX_DIMS];
} nt_arg;

typedef struct {
    const char *key; /* "gelu-approximate=tanh" */
    const char *op;
    uint8_t coalesce; /* enum nt_coalesce */
    uint8_t in_place; /* an output may be the very tensor an input is */
    uint8_t num_args;
    nt_arg args[NT_MAX_ARGS];
    uint8_t num_names;
    const char *names[NT_MAX_NAMES]; /* of the named dims, for messages: "rows", "inner" */
    int64_t sizes[NT_MAX_NAMES];     /* the size a variant was compiled for; 0: any */
    /* A derived dim's names, left to right: k + 1 multiplies by name k, -(k + 1)
     * divides (exactly); all 0: not derived. */
    int8_t derived[NT_MAX_NAMES][NT_MAX_FACTORS];
    int8_t key_arg[2];  /* the arguments whose sizes pick a bucket (-1: none, size 0) */
    uint8_t key_pos[2]; /* and their stored dims (NT_DIM) */
    uint32_t first_kernel;
    uint32_t num_kernels;
} nt_group;

/* One call, after validation and coalescing: what kernels are chosen by and fed. */
struct nt_call {
    int device;
    int capability;
    int multiprocessors; /* of the device: persistent kernels' grids are capped by it */
    int dtype;
    int ndim;  /* coalesced dims of the non-fixed tensors */
    int width; /* 64 when some offset or count does not fit int32 */
    nt_props has;
    uint64_t pointer[NT_MAX_ARGS];
    uint64_t workspace;           /* set at launch, for kernels that have one */
    int64_t launch;               /* a number no other launch of the process has (plans: 0) */
    double real[NT_MAX_ARGS];     /* scalars, as given when floats */
    int64_t integer[NT_MAX_ARGS]; /* scalars, as given when integers (floats truncated) */
    int64_t size[NT_MAX_ARGS][NT_MAX_DIMS];
    int64_t stride[NT_MAX_ARGS][NT_MAX_DIMS];
};

#define NT_SIZE(call, arg, pos) ((call)->size[(arg)][(pos)])

extern const nt_kernel nt_kernels[];
extern const uint32_t nt_num_kernels;
extern const uint64_t nt_image_sizes[]; /* bytes of each kernel's cubin (or PTX) */
extern const nt_group nt_groups[];
extern const uint32_t nt_num_groups;
typedef struct {
    const char *torch_name; /* "float16": the attribute of the torch module */
    uint64_t dlpack;        /* DLPack type code | bits << 8 | lanes << 16 */
} nt_dtype;

extern const nt_dtype nt_dtypes[];
extern const uint32_t nt_num_dtypes;

/* The flagship part of each arch the toolchain knows (aot/toolchain/targets.py): plans are made
 * for its multiprocessor count, since they have no device to ask. */
typedef struct {
    uint16_t capability;
    uint16_t multiprocessors;
} nt_target;

extern const nt_target nt_targets[];
extern const uint32_t nt_num_targets;

#endif
