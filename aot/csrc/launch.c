/* Kernel choice, parameter packing and the launch, in the core: which prebuilt kernel
 * a shaped call takes (table-driven: the group's kernels, most specialised first), the
 * values of its parameters, and the launch with the memory it needs. */
#include <stdatomic.h>

#include "core.h"

/* Tuning runs: only kernels built as this candidate of their bucket (-1: any). */
static _Thread_local int nt_candidate = -1;
/* Launches so far: each launch's id (NT_LAUNCH parameters) is the next, from 1. */
static atomic_llong nt_launches;

int nt_set_candidate(int candidate) {
    int previous = nt_candidate;
    nt_candidate = candidate;
    return previous;
}

int64_t nt_next_launch(void) {
    return atomic_fetch_add_explicit(&nt_launches, 1, memory_order_relaxed) + 1;
}

int nt_select(const nt_request *r, const uint16_t *arches, int num_arches, uint32_t *index) {
    const nt_group *g = r->group;
    const nt_call *c = &r->call;
    int64_t key = nt_bucket_key(r, 0), key2 = nt_bucket_key(r, 1);
    for (int a = 0; a < num_arches; a++)
        for (uint32_t k = g->first_kernel; k < g->first_kernel + g->num_kernels; k++) {
            const nt_kernel *kernel = &nt_kernels[k];
            const nt_props *needs = &kernel->needs;
            if (nt_kernel_arch(kernel) != arches[a] || kernel->dtype != c->dtype ||
                (g->coalesce != NT_COALESCE_NONE && kernel->ndim < c->ndim) ||
                (c->width == 64 && kernel->width != 64) || key < kernel->bucket[0][0] ||
                key > kernel->bucket[0][1] || key2 < kernel->bucket[1][0] ||
                key2 > kernel->bucket[1][1] ||
                (nt_candidate >= 0 && kernel->candidate != nt_candidate) ||
                (needs->unit & ~c->has.unit) || (needs->size16 & ~c->has.size16) ||
                (needs->stride16 & ~c->has.stride16) || (needs->aligned & ~c->has.aligned))
                continue;
            *index = k;
            return 1;
        }
    return 0;
}

typedef union {
    int8_t i1;
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    uint64_t pointer;
} nt_slot;

static void nt_pack(const nt_kernel *kernel, const nt_call *c, nt_slot *slots, void **params) {
    int n = 0;
    for (; n < kernel->num_params; n++) {
        const nt_param *p = &kernel->params[n];
        int64_t integer = 0;
        double real = 0;
        nt_value(c, p, &integer, &real);
        switch (p->type) {
        case NT_I1: slots[n].i1 = (int8_t)(integer != 0); break;
        case NT_I32: slots[n].i32 = (int32_t)integer; break;
        case NT_I64: slots[n].i64 = integer; break;
        case NT_F32: slots[n].f32 = (float)real; break;
        case NT_F64: slots[n].f64 = real; break;
        default: slots[n].pointer = (uint64_t)integer; break;
        }
        params[n] = &slots[n];
    }
    for (int extra = 0; extra < kernel->num_scratch; extra++, n++) {
        slots[n].pointer = 0; /* global scratch is filled in at launch; profile: none */
        params[n] = &slots[n];
    }
}

/* Launch, with the memory the kernel needs allocated before and freed after, both
 * ordered on the launch's stream: its workspace (grid x its per-program bytes, the
 * first grid x zeroed bytes zeroed) and its global scratch (likewise, for Triton). */
static CUresult nt_launch_with_memory(const nt_device *device, const nt_kernel *kernel,
                                      CUfunction function, int64_t grid, CUstream stream,
                                      nt_slot *slots, void **params, const char **what) {
    if (kernel->scratch == 0 && kernel->workspace == 0)
        return nt_launch(kernel, function, (uint32_t)grid, stream, params, what);
    size_t programs = (size_t)grid * kernel->num_ctas;
    size_t workspace = kernel->workspace ? programs * kernel->workspace + 128 : 0;
    size_t bytes = workspace + programs * kernel->scratch + kernel->scratch_align + 128;
    CUdeviceptr base = 0;
    CUresult result = nt_scratch_alloc(device, stream, bytes, &base, what);
    if (result != CUDA_SUCCESS)
        return result;
    CUdeviceptr first = (base + 127) / 128 * 128; /* pool blocks are aligned; be sure */
    if (kernel->workspace_zeroed)
        result = nt_scratch_zero(first, programs * kernel->workspace_zeroed, stream, what);
    for (int n = 0; n < kernel->num_params; n++)
        if (kernel->params[n].kind == NT_WORKSPACE)
            slots[n].pointer = first;
    if (kernel->scratch) {
        uint64_t align = kernel->scratch_align;
        slots[kernel->num_params].pointer = (first + workspace + align - 1) / align * align;
    }
    if (result == CUDA_SUCCESS)
        result = nt_launch(kernel, function, (uint32_t)grid, stream, params, what);
    const char *free_what = "";
    CUresult freed = nt_scratch_free(base, stream, &free_what);
    if (result == CUDA_SUCCESS && freed != CUDA_SUCCESS) {
        *what = free_what;
        result = freed;
    }
    return result;
}

CUresult nt_launch_call(const nt_device *device, const nt_kernel *kernel, CUfunction function,
                        int64_t grid, CUstream stream, const nt_call *call, const char **what) {
    nt_slot slots[NT_MAX_PARAMS + 2];
    void *params[NT_MAX_PARAMS + 2];
    nt_pack(kernel, call, slots, params);
    CUcontext previous;
    CUresult result = nt_enter(device, &previous, what);
    if (result != CUDA_SUCCESS)
        return result;
    result = nt_launch_with_memory(device, kernel, function, grid, stream, slots, params, what);
    const char *left_what = "";
    CUresult left = nt_leave(device, previous, &left_what);
    if (result == CUDA_SUCCESS && left != CUDA_SUCCESS) {
        *what = left_what;
        result = left;
    }
    return result;
}
