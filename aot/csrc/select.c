/* Kernel choice, in the core: which arches of the wheel a device of some capability
 * runs, best first, and which prebuilt kernel a shaped call takes among them
 * (table-driven: the group's kernels, most specialised first). */
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

int nt_arch_runs_on(const nt_kernel *kernel, int capability) {
    uint16_t built = kernel->capability;
    if (kernel->exact)
        return built == capability;
    /* PTX compiles for its capability and any later one. */
    if (kernel->ptx)
        return built <= capability;
    /* A cubin runs on its major version at equal or higher minor versions. */
    return built / 10 == capability / 10 && built % 10 <= capability % 10;
}

int nt_arches_for(int capability, uint16_t *arches) {
    int count = 0, cubins = 0;
    for (int want_ptx = 0; want_ptx <= 1 && !(want_ptx && cubins); want_ptx++) {
        int first = count;
        for (uint32_t k = 0; k < nt_num_kernels; k++) {
            const nt_kernel *kernel = &nt_kernels[k];
            if (kernel->ptx != want_ptx || !nt_arch_runs_on(kernel, capability))
                continue;
            uint16_t arch = nt_kernel_arch(kernel);
            int known = 0;
            for (int a = first; a < count; a++)
                known |= arches[a] == arch;
            if (!known && count < NT_MAX_ARCHES)
                arches[count++] = arch;
        }
        /* Best first: the closest capability below or at the device's. */
        for (int a = first + 1; a < count; a++)
            for (int b = a; b > first && arches[b] > arches[b - 1]; b--) {
                uint16_t swap = arches[b];
                arches[b] = arches[b - 1];
                arches[b - 1] = swap;
            }
        if (!want_ptx)
            cubins = count;
    }
    return count;
}

int nt_default_multiprocessors(int capability) {
    for (uint32_t t = 0; t < nt_num_targets; t++)
        if (nt_targets[t].capability == capability)
            return nt_targets[t].multiprocessors;
    return 1;
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
