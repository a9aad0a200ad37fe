/* Writing into the tensors a caller gave (out=, in-place forms) as torch does: checked
 * first against autograd and inference mode, copied back where the kernel wrote a
 * stand-in, their version counters moved after; and the outputs the caller left to
 * the launcher, allocated as torch's ops allocate them. */
#include <string.h>

#include "binding.h"

static int nt_true(PyObject *object) { /* steals the reference; -1 on error */
    if (object == NULL)
        return -1;
    int truth = PyObject_IsTrue(object);
    Py_DECREF(object);
    return truth;
}

/* Writes into tensors the caller gave (out=, in-place forms), checked as torch checks
 * them. Prebuilt kernels record no autograd, so a write that autograd would have to
 * see is refused rather than left out of the graph. */
int nt_check_writes(const nt_state *s) {
    const nt_group *g = s->request.group;
    int given = 0;
    for (int a = 0; a < g->num_args && !given; a++)
        given = (g->args[a].flags & NT_OUTPUT) && s->request.tensor[a].object != NULL;
    if (!given)
        return 0;
    /* The modes first: services run in inference mode or without grad, where the
     * tensors need fewer looks. In inference mode none: autograd records nothing there
     * (not even under enable_grad()), and inference tensors may be written. */
    int inference_mode = nt_true(nt_builtin_call(&nt_torch.is_inference_mode_enabled, NULL));
    if (inference_mode)
        return inference_mode < 0 ? -1 : 0;
    int grad_mode = nt_true(nt_builtin_call(&nt_torch.is_grad_enabled, NULL));
    if (grad_mode < 0)
        return -1;
    for (int a = 0; a < g->num_args; a++) {
        PyObject *out = nt_given(s, a);
        if (!(g->args[a].flags & NT_OUTPUT) || out == NULL)
            continue;
        /* `_version`, an attribute, costs less than is_inference(), a method that
         * releases the GIL; only inference tensors have no version counter to read. */
        PyObject *version = PyObject_GetAttr(out, nt_torch.s_version);
        if (version != NULL) {
            Py_DECREF(version);
            continue;
        }
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int inference = nt_true(nt_builtin_call(&nt_torch.is_inference, out));
        if (inference == 0) { /* not that: the attribute's own error */
            PyErr_Restore(type, value, traceback);
            return -1;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        if (inference) {
            if (inference > 0)
                PyErr_Format(PyExc_RuntimeError,
                             "%s: %s is an inference tensor: writing into it outside "
                             "torch.inference_mode() is not allowed (as in torch); clone it "
                             "first",
                             g->op, g->args[a].name);
            return -1;
        }
    }
    for (int a = 0; a < g->num_args && grad_mode; a++) {
        if (!(g->args[a].flags & NT_TENSOR) || s->request.tensor[a].object == NULL)
            continue;
        int grad = nt_true(PyObject_GetAttr(nt_given(s, a), nt_torch.s_requires_grad));
        if (grad) {
            if (grad > 0)
                PyErr_Format(PyExc_RuntimeError,
                             "%s: %s requires grad, and prebuilt kernels record no autograd: "
                             "the out= or in-place write would be missing from its graph; "
                             "call it under torch.no_grad(), or on detached tensors",
                             g->op, g->args[a].name);
            return -1;
        }
    }
    return 0;
}

/* torch._C._increment_version of `arg`: a tuple of tensors, or one tensor, as this
 * torch takes it (nt_torch.increment_takes_tuple). */
static int nt_increment(PyObject *arg) {
    PyObject *done =
        nt_torch.increment_function != NULL
            ? nt_torch.increment_function(PyCFunction_GetSelf(nt_torch.increment_version), arg)
            : PyObject_CallFunctionObjArgs(nt_torch.increment_version, arg, NULL);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* After a write into tensors the caller gave: their autograd version counters move,
 * as torch's own in-place ops move them, so a saved tensor's later use notices. */
int nt_bump_versions(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (int a = 0; a < g->num_args; a++) {
        PyObject *out = s->request.tensor[a].object;
        if (!(g->args[a].flags & NT_OUTPUT) || out == NULL || s->allocated[a] != NULL ||
            nt_torch.increment_version == NULL)
            continue;
        PyObject *outs = nt_torch.increment_takes_tuple ? PyTuple_Pack(1, out) : Py_NewRef(out);
        int failed = outs == NULL || nt_increment(outs);
        Py_XDECREF(outs);
        if (failed)
            return -1;
    }
    return 0;
}

/* The same for the runtime's own writes (the attention's caches, a subclass's op). */
int nt_increment_versions(PyObject *tensors) {
    if (!PyTuple_Check(tensors)) {
        PyErr_Format(PyExc_TypeError, "increment_versions takes a tuple of tensors, not %R",
                     (PyObject *)Py_TYPE(tensors));
        return -1;
    }
    if (nt_torch.increment_version == NULL)
        return 0;
    if (nt_torch.increment_takes_tuple)
        return nt_increment(tensors);
    for (Py_ssize_t t = 0; t < PyTuple_Size(tensors); t++)
        if (nt_increment(PyTuple_GetItem(tensors, t)))
            return -1;
    return 0;
}

/* Outputs written through a copy: copied where the caller wanted them (copy_ moves
 * their version counters). */
int nt_write_back(const nt_state *s) {
    for (int a = 0; a < s->request.group->num_args; a++) {
        if (s->write_back[a] == NULL)
            continue;
        PyObject *done = PyObject_CallMethod(s->write_back[a], "copy_", "O", s->owned[a]);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
    }
    return 0;
}

/* A new row-major tensor of `size` on `like`'s device, of its dtype unless `kwargs`
 * ({"dtype": ...}) says otherwise: like.new_empty_strided(size, row-major strides),
 * which torch's binding takes faster than new_empty(size) (0.9 against 1.3 us a call on
 * a CPU tensor, 4.5 against 5.2 on a meta one: torch 2.13, the 2-core machine). */
PyObject *nt_new_contiguous(PyObject *like, const int64_t *size, int ndim, PyObject *kwargs) {
    /* Tuples are filled before anything else holds them: PyTuple_SetItem refuses
     * tuples that are shared (and takes the item's reference, set or not). Strides as
     * torch's contiguous ones: a dim of size 0 counts as 1. */
    PyObject *shape = PyTuple_New(ndim), *strides = PyTuple_New(ndim);
    int failed = shape == NULL || strides == NULL;
    int64_t stride = 1;
    for (int d = ndim - 1; !failed && d >= 0; d--) {
        PyObject *size_object = PyLong_FromLongLong(size[d]);
        PyObject *stride_object = PyLong_FromLongLong(stride);
        if (size_object == NULL || stride_object == NULL) {
            Py_XDECREF(size_object);
            Py_XDECREF(stride_object);
            failed = 1;
        } else if (PyTuple_SetItem(shape, d, size_object)) {
            Py_DECREF(stride_object);
            failed = 1;
        } else {
            failed = PyTuple_SetItem(strides, d, stride_object) != 0;
        }
        stride *= size[d] > 1 ? size[d] : 1;
    }
    PyObject *method = failed ? NULL : PyObject_GetAttr(like, nt_torch.s_new_empty_strided);
    PyObject *args = method ? PyTuple_Pack(2, shape, strides) : NULL;
    PyObject *out = args ? PyObject_Call(method, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(method);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return out;
}

/* An output of `like`'s device, and dtype where it follows the call's: in the layout
 * of `like` where it has the output's shape, as torch's element-wise ops allocate; fixed
 * outputs (a product's) row-major, as torch's products return them. */
static int nt_allocate_like(nt_state *s, int a, const nt_tensor *like, const int64_t *size,
                            int ndim) {
    const nt_arg *arg = &s->request.group->args[a];
    int dtype = arg->dtype;
    PyObject *out;
    if (dtype < 0 && !(arg->flags & NT_FIXED) && like->ndim == ndim &&
        !memcmp(like->size, size, sizeof(int64_t) * (size_t)ndim)) {
        out = PyObject_CallFunctionObjArgs(nt_torch.empty_like, like->object, NULL);
    } else {
        out = nt_new_contiguous(like->object, size, ndim,
                                dtype >= 0 ? nt_torch.dtype_kwargs[dtype] : NULL);
    }
    if (out == NULL)
        return -1;
    s->allocated[a] = out;
    return nt_read_tensor(s, a, out);
}

int nt_allocate_outputs(nt_state *s) {
    nt_request *r = &s->request;
    const nt_group *g = r->group;
    for (int a = 0; a < g->num_args; a++) {
        if (!(g->args[a].flags & NT_OUTPUT) || r->tensor[a].object != NULL)
            continue;
        int64_t size[NT_MAX_DIMS];
        int ndim;
        const nt_tensor *like;
        if (nt_output_shape(r, a, size, &ndim, &like))
            return nt_raise(&r->error);
        if (nt_allocate_like(s, a, like, size, ndim))
            return -1;
    }
    return 0;
}
