/* Shape validation, in the core and in one place for every op: the one shape the
 * non-fixed tensors iterate over (broadcast for element-wise ops); the named dims (the
 * build's data, SPACE.dims), which say which sizes must agree (the inner dims of a
 * product, its batch, a norm's weight and its rows), which sizes the kernels were
 * compiled for (attention's head_dim) and which follow from others (attention's rows
 * of grouped query heads); and the shapes of the outputs the caller leaves to the
 * launcher. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

int nt_fail(nt_request *r, int kind, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(r->error.message, sizeof r->error.message, format, args);
    va_end(args);
    r->error.kind = kind;
    return -1;
}

static void nt_format_shape(char *out, size_t room, const int64_t *size, int ndim) {
    size_t used = (size_t)snprintf(out, room, "(");
    for (int d = 0; d < ndim && used < room; d++)
        used +=
            (size_t)snprintf(out + used, room - used, d ? ", %lld" : "%lld", (long long)size[d]);
    if (used < room)
        snprintf(out + used, room - used, ndim == 1 ? ",)" : ")");
}

static int nt_shape_error(nt_request *r, int a, int b, const char *what, const int64_t *size,
                          int ndim) {
    char left[256], right[256];
    const nt_tensor *t = &r->tensor[a];
    nt_format_shape(left, sizeof left, t->size, t->ndim);
    nt_format_shape(right, sizeof right, size, ndim);
    return nt_fail(r, NT_VALUE_ERROR, "%s: %s has shape %s, %s %s %s", r->group->op,
                   r->group->args[a].name, left, what, b >= 0 ? r->group->args[b].name : "", right);
}

/* The shape all non-fixed tensors iterate over: broadcast from the inputs for
 * element-wise ops, which outputs must have exactly; equal shapes otherwise. */
static int nt_iteration_shape(nt_request *r, int64_t *size, int *ndim) {
    const nt_group *g = r->group;
    *ndim = -1;
    int reference = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int a = 0; a < g->num_args; a++) {
            const nt_arg *arg = &g->args[a];
            const nt_tensor *t = &r->tensor[a];
            int output = (arg->flags & NT_OUTPUT) != 0;
            if (!(arg->flags & NT_TENSOR) || (arg->flags & NT_FIXED) || t->object == NULL ||
                output != pass)
                continue;
            if (*ndim < 0) {
                *ndim = t->ndim;
                memcpy(size, t->size, sizeof(int64_t) * (size_t)t->ndim);
                reference = a;
                continue;
            }
            if (g->coalesce != NT_COALESCE_ALL || output) {
                if (t->ndim != *ndim || memcmp(t->size, size, sizeof(int64_t) * (size_t)*ndim))
                    return nt_shape_error(r, a, reference,
                                          output ? "but the inputs broadcast to" : "but", size,
                                          *ndim);
                continue;
            }
            /* Broadcast, aligning trailing dims as torch does. */
            int n = t->ndim > *ndim ? t->ndim : *ndim;
            int64_t merged[NT_MAX_DIMS];
            for (int d = 0; d < n; d++) {
                int64_t x = d - (n - *ndim) >= 0 ? size[d - (n - *ndim)] : 1;
                int64_t y = d - (n - t->ndim) >= 0 ? t->size[d - (n - t->ndim)] : 1;
                if (x != y && x != 1 && y != 1)
                    return nt_shape_error(r, a, reference, "which does not broadcast with", size,
                                          *ndim);
                merged[d] = x == 1 ? y : x;
            }
            *ndim = n;
            memcpy(size, merged, sizeof(int64_t) * (size_t)n);
        }
    if (g->coalesce == NT_COALESCE_LEADING && *ndim < 1)
        return nt_fail(r, NT_VALUE_ERROR, "%s: expected at least 1 dim, got a 0-dim tensor", g->op);
    return 0;
}

/* The size of named dim `n` in this call: bound by a tensor or compiled in, or for a
 * derived dim, its names' sizes multiplied and divided left to right. -1 where a
 * name it needs is unbound; -2 where a quotient is not whole (`*bad`: the divisor,
 * `*dividend`: what it does not divide). */
static int64_t nt_name_size(const nt_request *r, int n, int *bad, int64_t *dividend) {
    const int8_t *factors = r->group->derived[n];
    if (r->named[n] >= 0 || factors[0] == 0)
        return r->named[n];
    int64_t size = 1;
    for (int f = 0; f < NT_MAX_FACTORS && factors[f]; f++) {
        int k = (factors[f] > 0 ? factors[f] : -factors[f]) - 1;
        int64_t x = r->named[k];
        if (x < 0)
            return -1;
        if (factors[f] > 0) {
            size *= x;
        } else if (x == 0 || size % x) {
            *bad = k;
            *dividend = size;
            return -2;
        } else {
            size /= x;
        }
    }
    return size;
}

/* The shape the named dims give argument `a` so far: its own size where a dim is
 * unnamed or its name not yet bound. */
static void nt_named_shape(const nt_request *r, int a, int64_t *size) {
    const nt_arg *arg = &r->group->args[a];
    const nt_tensor *t = &r->tensor[a];
    for (int d = 0; d < arg->ndim; d++) {
        int name = arg->dims[d], bad;
        int64_t own = d < t->ndim ? t->size[d] : 1, dividend;
        int64_t named = name >= 0 ? nt_name_size(r, name, &bad, &dividend) : -1;
        size[d] = named >= 0 ? named : own;
    }
}

/* A dim of `a` whose name `b` bound to another size (-1: compiled in): inputs that
 * disagree (a product's inner dims), an output that is not the result's shape, or a
 * size the kernels were not built for. */
static int nt_named_error(nt_request *r, int a, int b, int name) {
    const nt_group *g = r->group;
    char shape[256], other[256];
    nt_format_shape(shape, sizeof shape, r->tensor[a].size, r->tensor[a].ndim);
    if ((g->args[a].flags & NT_OUTPUT) && (g->args[a].flags & NT_FIXED)) {
        int64_t size[NT_MAX_DIMS];
        nt_named_shape(r, a, size);
        nt_format_shape(other, sizeof other, size, g->args[a].ndim);
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s has shape %s, but the result has shape %s", g->op,
                       g->args[a].name, shape, other);
    }
    if (b < 0)
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s has shape %s, but its %s dim must be %lld", g->op,
                       g->args[a].name, shape, g->names[name], (long long)r->named[name]);
    nt_format_shape(other, sizeof other, r->tensor[b].size, r->tensor[b].ndim);
    return nt_fail(r, NT_VALUE_ERROR,
                   "%s: %s has shape %s and %s has shape %s; their %s dims must be equal", g->op,
                   g->args[b].name, other, g->args[a].name, shape, g->names[name]);
}

/* An input that broadcasts to its named dims as torch broadcasts: its trailing dims
 * against them, each of their size or 1. */
static int nt_check_broadcast(nt_request *r, int a) {
    const nt_arg *arg = &r->group->args[a];
    const nt_tensor *t = &r->tensor[a];
    int64_t target[NT_MAX_DIMS];
    nt_named_shape(r, a, target);
    int fits = t->ndim <= arg->ndim;
    for (int d = 0; fits && d < t->ndim; d++) {
        int64_t own = t->size[d], wanted = target[arg->ndim - t->ndim + d];
        fits = own == wanted || own == 1;
    }
    if (fits)
        return 0;
    char shape[256], to[256];
    nt_format_shape(shape, sizeof shape, t->size, t->ndim);
    nt_format_shape(to, sizeof to, target, arg->ndim);
    return nt_fail(r, NT_VALUE_ERROR, "%s: %s has shape %s, which does not broadcast to %s",
                   r->group->op, arg->name, shape, to);
}

/* Dim `name` of argument `a` has `size`: it binds the name where nothing bound it
 * before (`binder` remembers who did), else must be of the name's size. */
static int nt_bind(nt_request *r, int a, int name, int64_t size, int *binder) {
    int bad = -1;
    int64_t dividend = 0;
    int64_t named = nt_name_size(r, name, &bad, &dividend);
    if (named == -2)
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s: %lld is not a multiple of %s (%lld)",
                       r->group->op, r->group->names[name], (long long)dividend,
                       r->group->names[bad], (long long)r->named[bad]);
    if (named >= 0 && size != named) {
        r->named[name] = named;
        return nt_named_error(r, a, binder[name], name);
    }
    if (named < 0 && r->group->derived[name][0] == 0) {
        r->named[name] = size;
        binder[name] = a;
    }
    return 0;
}

/* A fixed tensor: of its ndim, and its named dims of the sizes their names have. */
static int nt_check_named(nt_request *r, int a, int *binder) {
    const nt_arg *arg = &r->group->args[a];
    const nt_tensor *t = &r->tensor[a];
    if (arg->flags & NT_BROADCAST)
        return nt_check_broadcast(r, a);
    if (t->ndim != arg->ndim)
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s must be %d-D, not %d-D", r->group->op, arg->name,
                       arg->ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (arg->dims[d] >= 0 && nt_bind(r, a, arg->dims[d], t->size[d], binder))
            return -1;
    return 0;
}

/* The coalesced tensors that name their trailing dims (a norm's rows, whose last dim
 * its weight must have): of the iteration shape, which they all have. */
static int nt_check_trailing(nt_request *r, int *binder) {
    const nt_group *g = r->group;
    for (int a = 0; a < g->num_args; a++) {
        const nt_arg *arg = &g->args[a];
        if (!(arg->flags & NT_TENSOR) || (arg->flags & NT_FIXED) || r->tensor[a].object == NULL ||
            arg->dims[0] < 0)
            continue;
        int count = 0;
        while (count < NT_MAX_DIMS && arg->dims[count] >= 0)
            count++;
        if (r->ndim < count)
            return nt_fail(r, NT_VALUE_ERROR, "%s: %s must have at least %d dims, not %d", g->op,
                           arg->name, count, r->ndim);
        for (int k = 0; k < count; k++)
            if (nt_bind(r, a, arg->dims[k], r->shape[r->ndim - count + k], binder))
                return -1;
    }
    return 0;
}

/* The tensors that are not coalesced: inputs bind the names of their dims first, then
 * given outputs are checked against them, then inputs that broadcast. */
static int nt_check_fixed(nt_request *r) {
    const nt_group *g = r->group;
    int binder[NT_MAX_NAMES];
    for (int n = 0; n < g->num_names; n++) {
        r->named[n] = g->sizes[n] > 0 ? g->sizes[n] : -1;
        binder[n] = -1;
    }
    if (nt_check_trailing(r, binder))
        return -1;
    uint32_t later[2] = {0, 0}; /* given outputs; inputs that broadcast */
    for (int a = 0; a < g->num_args; a++) {
        int flags = g->args[a].flags;
        if (!(flags & NT_TENSOR) || !(flags & NT_FIXED) || r->tensor[a].object == NULL)
            continue;
        if (flags & (NT_OUTPUT | NT_BROADCAST))
            later[(flags & NT_BROADCAST) != 0] |= 1u << a;
        else if (nt_check_named(r, a, binder))
            return -1;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int a = 0; later[pass] >> a; a++)
            if ((later[pass] >> a & 1) && nt_check_named(r, a, binder))
                return -1;
    return 0;
}

/* After the tensors are read and their devices and dtypes checked. */
int nt_check_shapes(nt_request *r) {
    r->ndim = 0;
    if (r->group->coalesce != NT_COALESCE_NONE && nt_iteration_shape(r, r->shape, &r->ndim))
        return -1;
    return nt_check_fixed(r);
}

/* A fixed output's shape, where the inputs named all its dims; 0 where they did not. */
static int nt_named_output(const nt_request *r, const nt_arg *out, int64_t *size) {
    for (int d = 0; d < out->ndim; d++) {
        int name = out->dims[d], bad;
        int64_t dividend;
        if (name < 0 || (size[d] = nt_name_size(r, name, &bad, &dividend)) < 0)
            return 0;
    }
    return 1;
}

/* An output the caller left to the launcher, allocated like an input of the call's
 * dtype: of the iteration shape, or for a fixed one, of its named dims' sizes. */
int nt_output_shape(nt_request *r, int arg, int64_t *size, int *ndim, const nt_tensor **like) {
    const nt_group *g = r->group;
    const nt_arg *out = &g->args[arg];
    int fixed = (out->flags & NT_FIXED) != 0;
    *like = NULL;
    for (int a = 0; a < g->num_args && *like == NULL; a++)
        if ((g->args[a].flags & NT_TENSOR) && !(g->args[a].flags & NT_OUTPUT) &&
            g->args[a].dtype < 0 && r->tensor[a].object)
            *like = &r->tensor[a];
    if (*like == NULL || (fixed && !nt_named_output(r, out, size)))
        return nt_fail(r, NT_TYPE_ERROR, "%s: %s must be given", g->op, out->name);
    *ndim = fixed ? out->ndim : r->ndim;
    if (!fixed)
        memcpy(size, r->shape, sizeof(int64_t) * (size_t)r->ndim);
    return 0;
}
