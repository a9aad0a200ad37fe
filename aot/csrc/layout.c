/* Layout, in the core: with every output present, the dims of the non-fixed tensors
 * merged wherever every tensor is contiguous across them, every tensor stored as the
 * kernels read it, and the properties kernels may assume (unit strides, divisibility
 * by 16, 16-byte alignment, 32-bit offsets); outputs checked for what would race. */
#include <string.h>

#include "core.h"

/* Merge the dims of the non-fixed tensors into as few as their strides allow,
 * storing them right-aligned in the call. Element-wise ops may merge and reorder
 * all dims; row-wise reductions only the leading ones, keeping the last. */
static void nt_coalesce(nt_request *r, const int64_t *shape, int ndim) {
    const nt_group *g = r->group;
    nt_call *c = &r->call;
    int members[NT_MAX_ARGS], count = 0, reference = -1;
    int64_t size[NT_MAX_DIMS], stride[NT_MAX_ARGS][NT_MAX_DIMS];
    for (int a = 0; a < g->num_args; a++) {
        if (!(g->args[a].flags & NT_TENSOR) || (g->args[a].flags & NT_FIXED))
            continue;
        const nt_tensor *t = &r->tensor[a];
        for (int d = 0; d < ndim; d++) {
            int source = d - (ndim - t->ndim);
            int64_t own = source >= 0 ? t->size[source] : 1;
            /* Broadcast and size-1 dims: the stride is never multiplied by a non-zero index. */
            stride[count][d] = (source < 0 || own == 1) ? 0 : t->stride[source];
        }
        if (reference < 0 && (g->args[a].flags & NT_OUTPUT))
            reference = count;
        members[count++] = a;
    }
    memcpy(size, shape, sizeof(int64_t) * (size_t)ndim);
    if (reference < 0)
        reference = 0;
    int last = g->coalesce == NT_COALESCE_LEADING ? ndim - 1 : ndim; /* dims [0, last) may move */
    /* Order the movable dims by the output's strides, largest first (as torch's
     * TensorIterator does), so tensors that are dense in another order merge too. */
    for (int d = 1; d < last; d++)
        for (int e = d; e > 0 && stride[reference][e] > stride[reference][e - 1]; e--) {
            int64_t swap = size[e];
            size[e] = size[e - 1];
            size[e - 1] = swap;
            for (int m = 0; m < count; m++) {
                swap = stride[m][e];
                stride[m][e] = stride[m][e - 1];
                stride[m][e - 1] = swap;
            }
        }
    /* Drop size-1 dims and merge neighbours contiguous in every tensor. */
    int kept = 0;
    for (int d = 0; d < ndim; d++) {
        if (d < last && size[d] == 1)
            continue;
        int merge = kept > 0 && d < last;
        for (int m = 0; m < count && merge; m++)
            merge = stride[m][kept - 1] == stride[m][d] * size[d];
        if (merge) {
            size[kept - 1] *= size[d];
            for (int m = 0; m < count; m++)
                stride[m][kept - 1] = stride[m][d];
            continue;
        }
        size[kept] = size[d];
        for (int m = 0; m < count; m++)
            stride[m][kept] = stride[m][d];
        kept++;
    }
    if (kept == 0) { /* a one-element tensor */
        size[0] = 1;
        for (int m = 0; m < count; m++)
            stride[m][0] = 0;
        kept = 1;
    }
    c->ndim = kept;
    for (int m = 0; m < count; m++)
        for (int d = 0; d < kept; d++) {
            c->size[members[m]][NT_DIM(kept, d)] = size[d];
            c->stride[members[m]][NT_DIM(kept, d)] = stride[m][d];
        }
}

/* The fixed tensors, as checked (nt_check_fixed), at their kernel's ndim: an input
 * that broadcasts has its named dims' sizes, with stride 0 where it has size 1 or no
 * such dim; other size-1 dims get stride 0 too (never multiplied by a non-zero index). */
static void nt_store_fixed(nt_request *r) {
    const nt_group *g = r->group;
    for (int a = 0; a < g->num_args; a++) {
        const nt_arg *arg = &g->args[a];
        const nt_tensor *t = &r->tensor[a];
        if (!(arg->flags & NT_TENSOR) || !(arg->flags & NT_FIXED))
            continue;
        for (int d = 0; d < arg->ndim; d++) {
            int own = d - (arg->ndim - t->ndim);
            int64_t size = own >= 0 ? t->size[own] : 1;
            int64_t stride = size == 1 ? 0 : t->stride[own];
            if ((arg->flags & NT_BROADCAST) && size == 1)
                size = r->named[arg->dims[d]];
            r->call.size[a][NT_DIM(arg->ndim, d)] = size;
            r->call.stride[a][NT_DIM(arg->ndim, d)] = stride;
        }
    }
}

/* Outputs must own their elements: a stride-0 dim would race between programs. (An
 * empty output has none to own: torch gives some of them stride 0.) */
static int nt_check_outputs(nt_request *r) {
    const nt_group *g = r->group;
    for (int a = 0; a < g->num_args; a++) {
        const nt_tensor *t = &r->tensor[a];
        if (!(g->args[a].flags & NT_OUTPUT) || nt_count(t) == 0)
            continue;
        for (int d = 0; d < t->ndim; d++)
            if (t->stride[d] == 0 && t->size[d] > 1)
                return nt_fail(r, NT_VALUE_ERROR,
                               "%s: %s has a stride-0 dim (an expanded view): several results "
                               "would land on one element; pass a tensor that owns its memory",
                               g->op, g->args[a].name);
    }
    return 0;
}

/* 32- or 64-bit indexing, the properties kernels may assume, and emptiness. */
static void nt_properties(nt_request *r) {
    const nt_group *g = r->group;
    nt_call *c = &r->call;
    memset(&c->has, 0, sizeof c->has);
    c->width = 32;
    r->empty = 0;
    for (int a = 0; a < g->num_args; a++) {
        if (!(g->args[a].flags & NT_TENSOR))
            continue;
        int ndim = (g->args[a].flags & NT_FIXED) ? g->args[a].ndim : c->ndim;
        int64_t count = 1, extent = 0;
        /* Properties are bits of 64-bit words: later arguments are never specialised. */
        int bits = a < 64 / NT_MAX_DIMS;
        /* Leading padding (size 1, stride 0) has a unit stride, as any size-1 dim
         * does, and a stride divisible by 16. */
        for (int p = 0; bits && p < NT_MAX_DIMS - ndim; p++) {
            c->has.unit |= NT_BIT(a, p);
            c->has.stride16 |= NT_BIT(a, p);
        }
        for (int p = NT_MAX_DIMS - ndim; p < NT_MAX_DIMS; p++) {
            int64_t size = c->size[a][p], stride = c->stride[a][p];
            count =
                size == 0 || count == 0 ? 0 : (count > INT64_MAX / size ? INT64_MAX : count * size);
            extent += (size - 1) * (stride < 0 ? -stride : stride);
            if (size > NT_INT32_LIMIT || stride > NT_INT32_LIMIT || stride < -NT_INT32_LIMIT)
                c->width = 64;
            if (bits && (stride == 1 || size == 1))
                c->has.unit |= NT_BIT(a, p);
            if (bits && (size & 15) == 0)
                c->has.size16 |= NT_BIT(a, p);
            /* An expanded dim of a tensor read through TMA descriptors is no 16-byte
             * stride: descriptors cannot step by 0, its calls take pointer kernels. */
            int expanded = stride == 0 && size > 1 && (g->args[a].flags & NT_DESCRIBED);
            if (bits && (stride & 15) == 0 && !expanded)
                c->has.stride16 |= NT_BIT(a, p);
        }
        if (count > NT_INT32_LIMIT || extent > NT_INT32_LIMIT)
            c->width = 64;
        if (count == 0 && (g->args[a].flags & NT_OUTPUT))
            r->empty = 1;
        if ((c->pointer[a] & 15) == 0)
            c->has.aligned |= 1u << a;
    }
}

static int64_t nt_itemsize(int dtype) {
    return (int64_t)((nt_dtypes[dtype].dlpack >> 8) & 0xff) / 8;
}

/* Bytes [first, last] a tensor spans, by its own sizes and strides (not as broadcast
 * for the call); whether it is dense (every byte in the span is one of its elements,
 * in some order of its dims). Empty tensors span nothing. */
static int nt_span(const nt_tensor *t, int64_t itemsize, uint64_t *first, uint64_t *last) {
    int64_t extent = 0, count = nt_count(t);
    for (int d = 0; d < t->ndim; d++)
        extent += (t->size[d] - 1) * (t->stride[d] < 0 ? -t->stride[d] : t->stride[d]);
    *first = t->pointer;
    *last = t->pointer + (uint64_t)((extent + 1) * itemsize) - 1;
    return count > 0 && extent + 1 == count;
}

/* The same elements in the same order: strides of size-1 dims never matter. */
static int nt_same_elements(const nt_tensor *t, const nt_tensor *u) {
    if (t->pointer != u->pointer || t->ndim != u->ndim)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->size[d] != u->size[d] || (t->size[d] > 1 && t->stride[d] != u->stride[d]))
            return 0;
    return 1;
}

/* An output may share memory with another argument only element for element, and
 * only in ops that allow it (element-wise ops, out=input): any other overlap would
 * have programs read what others already overwrote. As torch decides it (its
 * assert_no_partial_overlap), by each tensor's own shape: `add(o, o[:1], out=o)`
 * broadcasts a row of the output itself, and is refused. Tensors that are not dense
 * (interleaved views, expanded ones) are let through, as torch lets them. */
static int nt_check_aliasing(nt_request *r) {
    const nt_group *g = r->group;
    if (r->empty)
        return 0;
    for (int a = 0; a < g->num_args; a++) {
        /* An output written back through a copy: its own memory is what inputs may
         * partly share (all of it is fine: the copy is written, then copied). */
        int given = (r->has_given >> a) & 1;
        const nt_tensor *out = given ? &r->given[a] : &r->tensor[a];
        if (!(g->args[a].flags & NT_OUTPUT) || (out->dtype < 0 && !given))
            continue;
        uint64_t first, last, other_first, other_last;
        int64_t itemsize = given ? r->given_itemsize[a] : nt_itemsize(out->dtype);
        int dense = nt_span(out, itemsize, &first, &last);
        for (int b = 0; b < g->num_args; b++) {
            const nt_tensor *other = &r->tensor[b];
            if (b == a || !(g->args[b].flags & NT_TENSOR) || other->object == NULL ||
                other->dtype < 0)
                continue;
            int other_dense = nt_span(other, nt_itemsize(other->dtype), &other_first, &other_last);
            if (other_last < first || last < other_first || !dense || !other_dense)
                continue;
            if (!(g->in_place || given) || !nt_same_elements(out, other))
                return nt_fail(r, NT_VALUE_ERROR,
                               "%s: %s and %s overlap in memory without being the same "
                               "elements; results would overwrite inputs before they are read "
                               "(pass a separate output, or clone the input)",
                               g->op, g->args[a].name, g->args[b].name);
        }
    }
    return 0;
}

/* With every output present (given or allocated): coalesce, store, qualify. */
int nt_layout(nt_request *r) {
    const nt_group *g = r->group;
    if (nt_check_outputs(r))
        return -1;
    for (int a = 0; a < g->num_args; a++) {
        if (!(g->args[a].flags & NT_TENSOR))
            continue;
        r->call.pointer[a] = r->tensor[a].pointer;
        for (int p = 0; p < NT_MAX_DIMS; p++) {
            r->call.size[a][p] = 1;
            r->call.stride[a][p] = 0;
        }
    }
    r->call.ndim = 0;
    if (g->coalesce != NT_COALESCE_NONE)
        nt_coalesce(r, r->shape, r->ndim);
    nt_store_fixed(r);
    nt_properties(r);
    return nt_check_aliasing(r);
}
