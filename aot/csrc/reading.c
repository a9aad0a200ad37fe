/* Reading a call's arguments into the core's nt_request: each tensor's dtype, device,
 * shape, strides and data pointer, through DLPack's C exchange API where torch offers it
 * (no Python calls per tensor; torch.c) and through torch's Python API otherwise; each
 * scalar both as an integer and as a real.
 *
 * What neither path shows is refused or resolved here: tensor subclasses that
 * override __torch_dispatch__ (FakeTensor while torch traces, functional and wrapper
 * tensors), whose memory is not their data; layouts other than strided; negative
 * views (`z.conj().imag`), whose memory holds their values negated. */
#include "binding.h"

static int nt_dtype_of_key(uint64_t key) {
    for (uint32_t d = 0; d < nt_num_dtypes; d++)
        if (nt_dtypes[d].dlpack == key)
            return (int)d;
    return -1;
}

static int nt_read_dlpack(const nt_dl_api *api, PyObject *object, nt_tensor *t) {
    nt_dl_tensor dl;
    if (api->dltensor_from_py_object_no_sync(object, &dl) != 0 || dl.ndim > NT_MAX_DIMS ||
        dl.ndim < 0)
        return -1;
    t->object = object;
    t->ndim = dl.ndim;
    int64_t compact = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        t->size[d] = dl.shape[d];
        t->stride[d] = dl.strides != NULL ? dl.strides[d] : compact;
        compact *= dl.shape[d];
    }
    t->pointer = (uint64_t)(uintptr_t)dl.data + dl.byte_offset;
    t->cuda = dl.device.type == NT_DL_CUDA;
    t->device = t->cuda ? dl.device.id : -1;
    t->dtype_key =
        (uint64_t)dl.dtype.code | (uint64_t)dl.dtype.bits << 8 | (uint64_t)dl.dtype.lanes << 16;
    t->dtype = nt_dtype_of_key(t->dtype_key);
    return 0;
}

static int nt_read_ints(PyObject *tuple, int64_t *out, int count) {
    for (int i = 0; i < count; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GetItem(tuple, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* Sparse, nested and other layouts have no strides (or no meaningful ones). */
static int nt_check_strided(const nt_state *s, int a, PyObject *object) {
    PyObject *layout = PyObject_GetAttr(object, nt_torch.s_layout);
    PyObject *nested = PyObject_GetAttr(object, nt_torch.s_is_nested);
    int strided = layout == nt_torch.strided && nested != NULL && !PyObject_IsTrue(nested);
    if (!strided && layout != NULL && nested != NULL)
        PyErr_Format(PyExc_TypeError,
                     "%s: %s is a %s tensor (layout %R); prebuilt kernels take strided, "
                     "non-nested tensors (convert with .to_dense() or unbind the nested one)",
                     s->request.group->op, s->request.group->args[a].name,
                     PyObject_IsTrue(nested) ? "nested" : "non-strided", layout);
    Py_XDECREF(layout);
    Py_XDECREF(nested);
    return strided ? 0 : -1;
}

static int nt_read_python(const nt_state *s, int a, PyObject *object, nt_tensor *t) {
    if (nt_check_strided(s, a, object))
        return -1;
    PyObject *dtype = PyObject_GetAttr(object, nt_torch.s_dtype);
    PyObject *cuda = PyObject_GetAttr(object, nt_torch.s_is_cuda);
    PyObject *device = PyObject_CallMethodObjArgs(object, nt_torch.s_get_device, NULL);
    PyObject *shape = PyObject_GetAttr(object, nt_torch.s_shape);
    PyObject *stride = PyObject_CallMethodObjArgs(object, nt_torch.s_stride, NULL);
    PyObject *pointer = PyObject_CallMethodObjArgs(object, nt_torch.s_data_ptr, NULL);
    int result = -1;
    if (!dtype || !cuda || !device || !shape || !stride || !pointer)
        goto done;
    t->object = object;
    t->dtype_key = (uint64_t)(uintptr_t)dtype; /* torch dtypes are singletons */
    t->dtype = -1;
    for (uint32_t d = 0; d < nt_num_dtypes; d++)
        if (nt_torch.dtypes[d] == dtype)
            t->dtype = (int)d;
    t->cuda = PyObject_IsTrue(cuda);
    t->device = (int)PyLong_AsLong(device);
    t->ndim = (int)PyTuple_Size(shape);
    t->pointer = PyLong_AsUnsignedLongLong(pointer);
    if (PyErr_Occurred())
        goto done;
    if (t->ndim > NT_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %d dims; prebuilt kernels take at most %d",
                     s->request.group->op, s->request.group->args[a].name, t->ndim, NT_MAX_DIMS);
        goto done;
    }
    result =
        nt_read_ints(shape, t->size, t->ndim) || nt_read_ints(stride, t->stride, t->ndim) ? -1 : 0;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(cuda);
    Py_XDECREF(device);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(pointer);
    return result;
}

/* The kernel writes `owned` in place of the given output `a`; nt_write_back copies. */
int nt_redirect(nt_state *s, int a, PyObject *given, PyObject *kwargs) {
    PyObject *args = PyTuple_Pack(1, given);
    PyObject *owned = args ? PyObject_Call(nt_torch.empty_like, args, kwargs) : NULL;
    Py_XDECREF(args);
    if (owned == NULL)
        return -1;
    Py_XDECREF(s->owned[a]);
    s->owned[a] = owned;
    s->write_back[a] = given;
    return 1;
}

/* A negative view's memory holds its values negated: an input is read from a
 * resolved copy, an output written through one (what torch's kernels do). */
static int nt_resolve_negative(nt_state *s, int a, PyObject *object) {
    PyObject *negative = nt_builtin_call(&nt_torch.is_neg, object);
    if (negative == NULL)
        return -1;
    int is_negative = PyObject_IsTrue(negative);
    Py_DECREF(negative);
    if (!is_negative)
        return 0;
    if (s->request.group->args[a].flags & NT_OUTPUT)
        return nt_redirect(s, a, object, NULL);
    PyObject *resolved = PyObject_CallMethodObjArgs(object, nt_torch.s_resolve_neg, NULL);
    if (resolved == NULL)
        return -1;
    Py_XDECREF(s->owned[a]);
    s->owned[a] = resolved;
    return 1;
}

/* 1, with SubclassError set, where one of `args` is a tensor subclass that overrides
 * __torch_dispatch__: for calls whose arguments are not read (an op this wheel lacks). */
int nt_refuse_subclasses(const nt_state *s, PyObject *const *args, Py_ssize_t nargs) {
    for (Py_ssize_t a = 0; a < nargs; a++) {
        int dispatch = 0;
        if (PyObject_TypeCheck(args[a], (PyTypeObject *)nt_torch.tensor_type) &&
            Py_TYPE(args[a]) != (PyTypeObject *)nt_torch.tensor_type)
            nt_api_of(Py_TYPE(args[a]), &dispatch);
        if (dispatch) {
            nt_subclass(s, "an argument", args[a]);
            return 1;
        }
    }
    return 0;
}

/* One tensor argument, by the exchange API unless this call already fell back. */
int nt_read_tensor(nt_state *s, int a, PyObject *object) {
    if (!PyObject_TypeCheck(object, (PyTypeObject *)nt_torch.tensor_type)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a torch.Tensor, not %R", s->request.group->op,
                     s->request.group->args[a].name, (PyObject *)Py_TYPE(object));
        return -1;
    }
    int dispatch = 0;
    const nt_dl_api *api = Py_TYPE(object) == (PyTypeObject *)nt_torch.tensor_type
                               ? nt_torch.api
                               : nt_api_of(Py_TYPE(object), &dispatch);
    if (dispatch) {
        nt_subclass(s, s->request.group->args[a].name, object);
        return -1;
    }
    switch (s->allocated[a] == object ? 0 : nt_resolve_negative(s, a, object)) {
    case -1: return -1;
    case 1: return nt_read_tensor(s, a, s->owned[a]);
    }
    nt_tensor *t = &s->request.tensor[a];
    if (!s->python_api) {
        if (api != NULL && nt_read_dlpack(api, object, t) == 0)
            return 0;
        PyErr_Clear();
        /* Read every tensor of this call one way, so their dtype keys compare. */
        s->python_api = 1;
        for (int b = 0; b < a; b++)
            if (s->request.tensor[b].object != NULL &&
                nt_read_python(s, b, s->request.tensor[b].object, &s->request.tensor[b]))
                return -1;
    }
    return nt_read_python(s, a, object, t);
}

/* Scalars are kept both ways; each kernel parameter takes the one its type needs. */
static int nt_read_scalar(nt_state *s, int a, PyObject *object) {
    nt_call *c = &s->request.call;
    if (PyLong_Check(object)) { /* bool too */
        c->integer[a] = PyLong_AsLongLong(object);
        c->real[a] = PyLong_AsDouble(object);
    } else if (PyFloat_Check(object)) {
        c->real[a] = PyFloat_AsDouble(object);
        double real = c->real[a]; /* NaN fails both tests: no undefined conversion */
        c->integer[a] = real > -9.2e18 && real < 9.2e18 ? (int64_t)real : 0;
    } else {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a Python number, not %R",
                     s->request.group->op, s->request.group->args[a].name,
                     (PyObject *)Py_TYPE(object));
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* A view of argument `a`'s tensor (read as given), as its wrapper names it instead of
 * making a torch view (as_strided costs a microsecond or more a call): (tensor, sizes,
 * dims), each of the view's dims `sizes[i]` long with stride `dims[i][1]` times the
 * tensor's stride of dim `dims[i][0]` (-1: stride 0, a broadcast). Read through the
 * tensor's own strides, so the view holds for a resolved copy too; refused unless every
 * element lies within the tensor's. */
static int nt_read_view(nt_state *s, int a, PyObject *spec) {
    nt_tensor *t = &s->request.tensor[a];
    PyObject *sizes = PyTuple_GetItem(spec, 1), *dims = PyTuple_GetItem(spec, 2);
    int ndim = sizes != NULL && PyTuple_Check(sizes) ? (int)PyTuple_Size(sizes) : -1;
    if (ndim < 0 || ndim > NT_MAX_DIMS || dims == NULL || !PyTuple_Check(dims) ||
        PyTuple_Size(dims) != ndim) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s: a view is (tensor, sizes, dims) of at most %d dims",
                     s->request.group->op, s->request.group->args[a].name, NT_MAX_DIMS);
        return -1;
    }
    int64_t size[NT_MAX_DIMS], stride[NT_MAX_DIMS], reach = 0, held = 0;
    int empty = 0, none = 0;
    for (int d = 0; d < t->ndim; d++) {
        none |= t->size[d] == 0;
        held += (t->size[d] - 1) * t->stride[d];
    }
    for (int d = 0; d < ndim; d++) {
        PyObject *dim = PyTuple_GetItem(dims, d);
        long long of = -2, times = -1;
        size[d] = PyLong_AsLongLong(PyTuple_GetItem(sizes, d));
        if (dim != NULL && PyTuple_Check(dim) && PyTuple_Size(dim) == 2) {
            of = PyLong_AsLongLong(PyTuple_GetItem(dim, 0));
            times = PyLong_AsLongLong(PyTuple_GetItem(dim, 1));
        }
        if (PyErr_Occurred() || size[d] < 0 || of < -1 || of >= t->ndim || times < 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: %s: view dim %d is not (size >= 0, (dim, times))",
                         s->request.group->op, s->request.group->args[a].name, d);
            return -1;
        }
        stride[d] = of < 0 ? 0 : times * t->stride[of];
        empty |= size[d] == 0;
        reach += (size[d] - 1) * stride[d];
    }
    if (!empty && (none || reach > held)) {
        PyErr_Format(PyExc_ValueError, "%s: %s: the view reaches past its tensor",
                     s->request.group->op, s->request.group->args[a].name);
        return -1;
    }
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->size[d] = size[d];
        t->stride[d] = stride[d];
    }
    return 0;
}

/* Whether argument `a` comes as a view (tensor, sizes, dims): nt_read_view's. */
static int nt_is_view(PyObject *object) {
    return PyTuple_Check(object) && PyTuple_Size(object) == 3;
}

/* Input `a` as an earlier input read from the same tensor as given (attention's key
 * and value passed again as the absent new entries): read once. 1 if so. */
static int nt_read_again(nt_state *s, int a, PyObject *tensor) {
    const nt_group *g = s->request.group;
    if (g->args[a].flags & NT_OUTPUT)
        return 0;
    for (int b = 0; b < a; b++)
        if (s->request.tensor[b].object == tensor && !(g->args[b].flags & NT_OUTPUT) &&
            s->owned[b] == NULL) {
            s->request.tensor[a] = s->request.tensor[b];
            return 1;
        }
    return 0;
}

int nt_read_args(nt_state *s, PyObject *const *args, Py_ssize_t nargs) {
    const nt_group *g = s->request.group;
    if (nargs != g->num_args) {
        PyErr_Format(PyExc_TypeError, "%s: the launcher takes %d arguments, got %zd", g->op,
                     g->num_args, nargs);
        return -1;
    }
    for (int a = 0; a < g->num_args; a++) {
        s->request.tensor[a].object = NULL;
        s->allocated[a] = NULL;
        s->owned[a] = NULL;
        s->write_back[a] = NULL;
    }
    s->request.has_given = 0;
    for (int a = 0; a < g->num_args; a++) {
        if (!(g->args[a].flags & NT_TENSOR)) {
            if (nt_read_scalar(s, a, args[a]))
                return -1;
        } else if (args[a] != Py_None || !(g->args[a].flags & NT_OUTPUT)) {
            PyObject *tensor = nt_is_view(args[a]) ? PyTuple_GetItem(args[a], 0) : args[a];
            if (!nt_read_again(s, a, tensor) && nt_read_tensor(s, a, tensor))
                return -1;
        }
    }
    /* Views last: a call that falls back to torch's Python API reads its tensors again. */
    for (int a = 0; a < g->num_args; a++)
        if ((g->args[a].flags & NT_TENSOR) && nt_is_view(args[a]) && nt_read_view(s, a, args[a]))
            return -1;
    return 0;
}

/* A plain tensor read through the exchange API: a torch.Tensor, or a subclass that does
 * not override __torch_dispatch__ (nn.Parameter: a model's weights), as launches read
 * them; or -1 (nothing raised) where it cannot be: another type, a subclass that
 * overrides __torch_dispatch__, no exchange API, a tensor it declines. */
int nt_read_plain(PyObject *object, nt_tensor *t) {
    const nt_dl_api *api = nt_torch.api;
    if (Py_TYPE(object) != (PyTypeObject *)nt_torch.tensor_type) {
        int dispatch = 0;
        if (!PyObject_TypeCheck(object, (PyTypeObject *)nt_torch.tensor_type))
            return -1;
        api = nt_api_of(Py_TYPE(object), &dispatch);
        if (dispatch)
            api = NULL;
    }
    if (api != NULL && nt_read_dlpack(api, object, t) == 0)
        return 0;
    PyErr_Clear();
    return -1;
}
