/* The core of the launcher: one call, without CUDA or Python. The binding (binding.h)
 * reads the call's tensors into an nt_request; the core checks their shapes and says
 * which outputs to allocate (shapes.c), coalesces their dims and finds what the kernels
 * may assume (layout.c), and chooses the kernel among the arches a device runs
 * (select.c); the values of its parameters are nt_value's. The driver (driver.h)
 * launches it. A failed check comes back as an nt_error, which the binding raises. */
#ifndef NTOPS_CORE_H
#define NTOPS_CORE_H

#include "ntops.h"

/* Offsets must stay clear of int32 overflow for the 32-bit kernels, with room for
 * a block's worth of masked-off lanes past the end. */
#define NT_INT32_LIMIT ((int64_t)INT32_MAX - 65536)

typedef struct {
    void *object;       /* the binding's tensor; NULL where none was given */
    uint64_t dtype_key; /* equal for tensors of equal dtype */
    int dtype;          /* index into nt_dtypes; -1: a dtype no kernel takes */
    int cuda;           /* on a CUDA device */
    int device;
    int ndim;
    int64_t size[NT_MAX_DIMS];
    int64_t stride[NT_MAX_DIMS];
    uint64_t pointer;
} nt_tensor;

/* Elements of a tensor. */
static inline int64_t nt_count(const nt_tensor *t) {
    int64_t count = 1;
    for (int d = 0; d < t->ndim; d++)
        count *= t->size[d];
    return count;
}

/* What a failed check raises (ValueError or TypeError, as torch raises them), and why. */
enum nt_error_kind { NT_VALUE_ERROR = 1, NT_TYPE_ERROR };

typedef struct {
    int kind;
    char message[1024];
} nt_error;

typedef struct {
    const nt_group *group;
    int plan; /* no launch: CPU or meta tensors allowed, capability given */
    nt_tensor tensor[NT_MAX_ARGS];
    nt_tensor given[NT_MAX_ARGS]; /* as read, for outputs written back: aliasing checks */
    int64_t given_itemsize[NT_MAX_ARGS];
    uint32_t has_given;         /* bit per arg */
    int64_t shape[NT_MAX_DIMS]; /* the one the non-fixed tensors iterate over */
    int ndim;
    int64_t named[NT_MAX_NAMES]; /* the size of each of the group's named dims */
    nt_call call;
    int empty; /* an output has no elements: nothing to launch */
    nt_error error;
} nt_request;

/* Fail the call with a message as printf formats it; returns -1. */
__attribute__((format(printf, 3, 4))) int nt_fail(nt_request *r, int kind, const char *format, ...);

/* shapes.c, then layout.c. Each returns 0, or -1 with r->error set. */
int nt_check_shapes(nt_request *r); /* after the tensors are read: every shape */
/* An output the caller did not give: its shape, and the input to allocate it like. */
int nt_output_shape(nt_request *r, int arg, int64_t *size, int *ndim, const nt_tensor **like);
int nt_layout(nt_request *r); /* with every output present: coalesce, qualify, aliasing */

/* A size that picks a call's bucket (which: the first or second key); 0 where the
 * group has no such key. Inline, as nt_value below: the binding's plan reads them too,
 * and a call across files per parameter cost a plan of add about 20 ns. */
static inline int64_t nt_bucket_key(const nt_request *r, int which) {
    const nt_group *g = r->group;
    int arg = g->key_arg[which];
    return arg < 0 ? 0 : r->call.size[arg][g->key_pos[which]];
}

/* A parameter's value: integer (returns 0) or real (returns 1), as its type asks. */
static inline int nt_value(const nt_call *c, const nt_param *p, int64_t *integer, double *real) {
    switch (p->kind) {
    case NT_POINTER: *integer = (int64_t)c->pointer[p->arg]; return 0;
    case NT_SIZE: *integer = c->size[p->arg][p->dim]; return 0;
    case NT_STRIDE: *integer = c->stride[p->arg][p->dim]; return 0;
    case NT_WORKSPACE: *integer = (int64_t)c->workspace; return 0;
    case NT_LAUNCH: *integer = c->launch; return 0;
    default:
        *integer = c->integer[p->arg];
        *real = c->real[p->arg];
        return p->type == NT_F32 || p->type == NT_F64;
    }
}

/* select.c. */
#define NT_MAX_ARCHES 16
/* A kernel's arch as nt_arches_for lists it: its capability, with NT_PTX_ARCH set
 * for PTX, so a cubin and the PTX of one capability are told apart. */
#define NT_PTX_ARCH 0x8000u
static inline uint16_t nt_kernel_arch(const nt_kernel *kernel) {
    return (uint16_t)(kernel->capability | (kernel->ptx ? NT_PTX_ARCH : 0u));
}
int nt_arch_runs_on(const nt_kernel *kernel, int capability);
/* The wheel's arches (nt_kernel_arch) that run on `capability`, best first: cubins,
 * closest capability first; PTX only when no cubin runs there. Returns how many. */
int nt_arches_for(int capability, uint16_t *arches);
/* The multiprocessor count of a flagship part of `capability` (plan mode: no device). */
int nt_default_multiprocessors(int capability);
/* The most specialised kernel for the call among `arches` (best first); 0: none. */
int nt_select(const nt_request *r, const uint16_t *arches, int num_arches, uint32_t *index);
int nt_set_candidate(int candidate); /* tuning: kernels of this candidate only (-1: any) */
int64_t nt_next_launch(void);        /* a number no other launch of the process has, from 1 */

#endif
