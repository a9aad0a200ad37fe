/* The tensors of a call, once read, checked together: every one on one CUDA device,
 * those that follow the call's dtype of one dtype, the others of their own; an out= of
 * another dtype (a comparison's bools into floats, as torch allows) written through a
 * copy of the kernel's dtype. */
#include "binding.h"

static int nt_mismatch(const nt_state *s, int a, int b, const char *what) {
    const nt_request *r = &s->request;
    PyObject *left = nt_dtype_object(&r->tensor[a]), *right = nt_dtype_object(&r->tensor[b]);
    if (left != NULL && right != NULL)
        PyErr_Format(
            PyExc_TypeError, "%s: expected all tensors to have one %s, but %s is %R and %s is %R",
            r->group->op, what, r->group->args[a].name, left, r->group->args[b].name, right);
    Py_XDECREF(left);
    Py_XDECREF(right);
    return -1;
}

static int nt_wrong_dtype(const nt_state *s, int a, int expected) {
    const nt_request *r = &s->request;
    PyObject *dtype = nt_dtype_object(&r->tensor[a]);
    if (dtype != NULL)
        PyErr_Format(PyExc_TypeError, "%s: %s must be torch.%s, not %R", r->group->op,
                     r->group->args[a].name, nt_dtypes[expected].torch_name, dtype);
    Py_XDECREF(dtype);
    return -1;
}

/* Every tensor on one CUDA device (in a plan, on one device of any kind); those
 * that follow the call's dtype all of one dtype, the others of their own. */
int nt_check_devices_and_dtypes(nt_state *s) {
    nt_request *r = &s->request;
    const nt_group *g = r->group;
    int first = -1, typed = -1;
    for (int a = 0; a < g->num_args; a++) {
        const nt_tensor *t = &r->tensor[a];
        if (t->object == NULL)
            continue;
        if (!t->cuda && !r->plan) {
            PyErr_Format(PyExc_TypeError,
                         "%s: expected CUDA tensors, but %s is on the CPU or another device type; "
                         "move it with .cuda()",
                         g->op, g->args[a].name);
            return -1;
        }
        if (t->pointer == 0 && nt_count(t) != 0 && !r->plan) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s has no memory (a null data pointer, as fake and meta tensors "
                         "have); prebuilt kernels need tensors with CUDA memory",
                         g->op, g->args[a].name);
            return -1;
        }
        if (first >= 0 && t->device != r->tensor[first].device) {
            PyErr_Format(
                PyExc_ValueError,
                "%s: expected all tensors on one device, but %s is on cuda:%d and %s on cuda:%d",
                g->op, g->args[first].name, r->tensor[first].device, g->args[a].name, t->device);
            return -1;
        }
        first = first < 0 ? a : first;
        if (g->args[a].dtype >= 0 && t->dtype != g->args[a].dtype &&
            (g->args[a].flags & NT_OUTPUT) && s->write_back[a] == NULL) {
            /* A comparison into an out= of another dtype: torch casts its bools there. */
            r->given[a] = *t;
            r->has_given |= 1u << a;
            PyObject *itemsize = PyObject_CallMethod(t->object, "element_size", NULL);
            r->given_itemsize[a] = itemsize ? PyLong_AsLongLong(itemsize) : -1;
            Py_XDECREF(itemsize);
            if (r->given_itemsize[a] < 0)
                return -1;
            if (nt_redirect(s, a, t->object, nt_torch.dtype_kwargs[g->args[a].dtype]) < 0 ||
                nt_read_tensor(s, a, s->owned[a]))
                return -1;
        }
        if (g->args[a].dtype >= 0) {
            if (t->dtype != g->args[a].dtype)
                return nt_wrong_dtype(s, a, g->args[a].dtype);
        } else if (typed < 0) {
            typed = a;
        } else if (t->dtype_key != r->tensor[typed].dtype_key) {
            return nt_mismatch(s, typed, a, "dtype");
        }
    }
    if (first < 0 || typed < 0) {
        PyErr_Format(PyExc_TypeError, "%s: no tensor gives the call its dtype", g->op);
        return -1;
    }
    r->call.device = r->tensor[first].device;
    r->call.dtype = r->tensor[typed].dtype;
    return 0;
}
