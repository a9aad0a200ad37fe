/* Shape validation, in the core and in one place for every op: the one shape the
 * non-fixed tensors iterate over (broadcast for element-wise ops); the fixed tensors'
 * dims, whose names (the build's data, SPACE.dims) say which sizes must agree (the
 * inner dims of a product, its batch); and the shapes of the outputs the caller leaves
 * to the launcher. */
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

/* The shape the named dims give argument `a` so far: its own size where a dim is
 * unnamed or its name not yet bound. */
static void nt_named_shape(const nt_request *r, int a, int64_t *size) {
    const nt_arg *arg = &r->group->args[a];
    const nt_tensor *t = &r->tensor[a];
    for (int d = 0; d < arg->ndim; d++) {
        int name = arg->dims[d];
        int64_t own = d < t->ndim ? t->size[d] : 1;
        size[d] = name >= 0 && r->named[name] >= 0 ? r->named[name] : own;
    }
}

/* A dim of `a` whose name `b` bound to another size: inputs that disagree (a
 * product's inner dims), or an output that is not the result's shape. */
static int nt_named_error(nt_request *r, int a, int b, int name) {
    const nt_group *g = r->group;
    char shape[256], other[256];
    nt_format_shape(shape, sizeof shape, r->tensor[a].size, r->tensor[a].ndim);
    if (g->args[a].flags & NT_OUTPUT) {
        int64_t size[NT_MAX_DIMS];
        nt_named_shape(r, a, size);
        nt_format_shape(other, sizeof other, size, g->args[a].ndim);
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s has shape %s, but the result has shape %s", g->op,
                       g->args[a].name, shape, other);
    }
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

/* A fixed tensor: of its ndim, and its named dims of the sizes their names have (it
 * binds the names nothing bound before it; `binder` remembers who did). */
static int nt_check_named(nt_request *r, int a, int *binder) {
    const nt_arg *arg = &r->group->args[a];
    const nt_tensor *t = &r->tensor[a];
    if (arg->flags & NT_BROADCAST)
        return nt_check_broadcast(r, a);
    if (t->ndim != arg->ndim)
        return nt_fail(r, NT_VALUE_ERROR, "%s: %s must be %d-D, not %d-D", r->group->op, arg->name,
                       arg->ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++) {
        int name = arg->dims[d];
        if (name < 0)
            continue;
        if (r->named[name] < 0) {
            r->named[name] = t->size[d];
            binder[name] = a;
        } else if (t->size[d] != r->named[name]) {
            return nt_named_error(r, a, binder[name], name);
        }
    }
    return 0;
}

/* The tensors that are not coalesced: inputs bind the names of their dims first, then
 * given outputs are checked against them, then inputs that broadcast. */
static int nt_check_fixed(nt_request *r) {
    const nt_group *g = r->group;
    int binder[NT_MAX_NAMES];
    for (int n = 0; n < g->num_names; n++) {
        r->named[n] = -1;
        binder[n] = -1;
    }
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
        int name = out->dims[d];
        if (name < 0 || r->named[name] < 0)
            return 0;
        size[d] = r->named[name];
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
