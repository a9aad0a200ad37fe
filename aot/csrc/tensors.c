/* torch, as the launcher sees it: each tensor's dtype, device, shape, strides and
 * data pointer, torch's current stream, and new output tensors.
 *
 * torch publishes DLPack's C exchange API on its tensor type
 * (`__dlpack_c_exchange_api__`): one C call fills a DLTensor and another returns
 * the current stream, with no Python objects made. Reading a tensor through its
 * Python API instead (dtype, device, shape, stride(), data_ptr()) takes several
 * Python calls per tensor, which on the H200 test machine cost more than the kernel
 * launch itself. That path remains for torch versions without the exchange API
 * and for tensors it declines (meta tensors, say).
 *
 * What neither path shows is refused or resolved here: tensor subclasses that
 * override __torch_dispatch__ (FakeTensor while torch traces, functional and wrapper
 * tensors), whose memory is not their data; layouts other than strided; negative
 * views (`z.conj().imag`), whose memory holds their values negated. */
#include <string.h>

#include "binding.h"

/* The parts of DLPack 1.x (dlpack.h) that the exchange API hands over. */
typedef struct {
    uint32_t major, minor;
} nt_dl_version;

typedef struct {
    void *data;
    struct {
        int32_t type, id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} nt_dl_tensor;

typedef struct nt_dl_header {
    nt_dl_version version;
    struct nt_dl_header *prev_api;
} nt_dl_header;

typedef struct {
    nt_dl_header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, nt_dl_tensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **stream);
} nt_dl_api;

enum { NT_DL_CUDA = 2, NT_DL_MAJOR = 1, NT_API_TYPES = 8 };

/* A METH_NOARGS builtin of torch's (a tensor method or a module function), called
 * through its C function: the checks every launch makes cost more in method lookup
 * and call machinery than in the calls. Else, called the usual way. */
typedef struct {
    PyCFunction function;
    PyObject *self;     /* a module function's module; NULL for tensor methods */
    PyObject *callable; /* the usual way: a module function, or NULL (the method `name`) */
    PyObject *name;
} nt_builtin;

static void nt_builtin_init(nt_builtin *b, PyObject *bound, PyObject *callable, PyObject *name,
                            int method) {
    b->function = NULL;
    b->callable = callable;
    b->name = name;
    if (bound != NULL && PyCFunction_Check(bound) &&
        (PyCFunction_GetFlags(bound) & ~METH_COEXIST) == METH_NOARGS) {
        b->function = PyCFunction_GetFunction(bound);
        b->self = method ? NULL : PyCFunction_GetSelf(bound);
    }
    PyErr_Clear();
}

static PyObject *nt_builtin_call(const nt_builtin *b, PyObject *tensor) {
    if (b->function != NULL)
        return b->function(tensor != NULL ? tensor : b->self, NULL);
    if (tensor != NULL)
        return PyObject_CallMethodObjArgs(tensor, b->name, NULL);
    return PyObject_CallObject(b->callable, NULL);
}

static struct {
    int ready;
    int force_python; /* tests: take the Python API path */
    PyObject *tensor_type;
    PyObject *dtypes[NT_MAX_DTYPES];
    PyObject *dtype_kwargs[NT_MAX_DTYPES]; /* {"dtype": torch.<dtype>} for new outputs */
    const nt_dl_api *api;                  /* of torch.Tensor itself */
    PyTypeObject *api_types[NT_API_TYPES];
    const nt_dl_api *apis[NT_API_TYPES];
    int dispatches[NT_API_TYPES]; /* the type overrides __torch_dispatch__ */
    int num_api_types;
    PyObject *plain_dispatch; /* torch.Tensor.__torch_dispatch__ */
    PyObject *strided, *increment_version;
    PyCFunction increment_function; /* its C function, where it takes one argument */
    int increment_takes_tuple;      /* 2.11 wants an iterable, 2.4 a tensor, 2.15 either */
    nt_builtin is_neg, is_inference, is_grad_enabled, is_inference_mode_enabled;
    PyObject *raw_stream; /* torch._C._cuda_getCurrentRawStream */
    PyObject *empty_like;
    PyObject *s_dtype, *s_data_ptr, *s_shape, *s_stride, *s_get_device, *s_is_cuda, *s_new_empty,
        *s_cuda_stream, *s_api, *s_torch_dispatch, *s_func, *s_is_neg, *s_resolve_neg,
        *s_requires_grad, *s_is_inference, *s_layout, *s_is_nested, *s_version;
} torch;

static const nt_dl_api *nt_api_of(PyTypeObject *type, int *dispatch);

/* The attribute names the launcher looks up, interned once. */
static int nt_intern_names(void) {
    static const struct {
        PyObject **name;
        const char *text;
    } names[] = {
        {&torch.s_dtype, "dtype"},
        {&torch.s_data_ptr, "data_ptr"},
        {&torch.s_shape, "shape"},
        {&torch.s_stride, "stride"},
        {&torch.s_get_device, "get_device"},
        {&torch.s_is_cuda, "is_cuda"},
        {&torch.s_new_empty, "new_empty"},
        {&torch.s_cuda_stream, "cuda_stream"},
        {&torch.s_api, "__dlpack_c_exchange_api__"},
        {&torch.s_torch_dispatch, "__torch_dispatch__"},
        {&torch.s_func, "__func__"},
        {&torch.s_is_neg, "is_neg"},
        {&torch.s_resolve_neg, "resolve_neg"},
        {&torch.s_requires_grad, "requires_grad"},
        {&torch.s_is_inference, "is_inference"},
        {&torch.s_layout, "layout"},
        {&torch.s_is_nested, "is_nested"},
        {&torch.s_version, "_version"},
    };
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        if ((*names[n].name = PyUnicode_InternFromString(names[n].text)) == NULL)
            return -1;
    return 0;
}

int nt_torch_init(void) {
    if (torch.ready)
        return 0;
    PyObject *module = PyImport_ImportModule("torch");
    if (module == NULL)
        return -1;
    if (nt_intern_names())
        goto fail;
    torch.tensor_type = PyObject_GetAttrString(module, "Tensor");
    torch.empty_like = PyObject_GetAttrString(module, "empty_like");
    torch.strided = PyObject_GetAttrString(module, "strided");
    PyObject *grad_enabled = PyObject_GetAttrString(module, "is_grad_enabled");
    PyObject *inference_enabled = PyObject_GetAttrString(module, "is_inference_mode_enabled");
    PyObject *sample = PyObject_CallMethod(module, "empty", "i", 0);
    if (torch.tensor_type == NULL || torch.empty_like == NULL || torch.strided == NULL ||
        grad_enabled == NULL || inference_enabled == NULL || sample == NULL) {
        Py_XDECREF(sample);
        goto fail;
    }
    nt_builtin_init(&torch.is_grad_enabled, grad_enabled, grad_enabled, NULL, 0);
    nt_builtin_init(&torch.is_inference_mode_enabled, inference_enabled, inference_enabled, NULL,
                    0);
    PyObject *bound = PyObject_GetAttr(sample, torch.s_is_neg);
    nt_builtin_init(&torch.is_neg, bound, NULL, torch.s_is_neg, 1);
    Py_XDECREF(bound);
    bound = PyObject_GetAttr(sample, torch.s_is_inference);
    nt_builtin_init(&torch.is_inference, bound, NULL, torch.s_is_inference, 1);
    Py_XDECREF(bound);
    Py_DECREF(sample);
    torch.plain_dispatch = PyObject_GetAttr(torch.tensor_type, torch.s_torch_dispatch);
    PyErr_Clear(); /* a torch without __torch_dispatch__ has no such subclasses */
    for (uint32_t d = 0; d < nt_num_dtypes; d++) {
        if ((torch.dtypes[d] = PyObject_GetAttrString(module, nt_dtypes[d].torch_name)) == NULL ||
            (torch.dtype_kwargs[d] = PyDict_New()) == NULL ||
            PyDict_SetItem(torch.dtype_kwargs[d], torch.s_dtype, torch.dtypes[d]))
            goto fail;
    }
    PyObject *c = PyObject_GetAttrString(module, "_C");
    if (c != NULL) {
        torch.increment_version = PyObject_GetAttrString(c, "_increment_version");
        if (torch.increment_version != NULL && PyCFunction_Check(torch.increment_version) &&
            (PyCFunction_GetFlags(torch.increment_version) & ~METH_COEXIST) == METH_O)
            torch.increment_function = PyCFunction_GetFunction(torch.increment_version);
        PyErr_Clear();
        /* Which argument this torch's _increment_version takes: asked once, of a
         * scratch tensor, rather than failing a write later. */
        PyObject *probe = PyObject_CallMethod(module, "empty", "i", 0);
        PyObject *probes = probe ? PyTuple_Pack(1, probe) : NULL;
        PyObject *done = probes && torch.increment_version
                             ? PyObject_CallFunctionObjArgs(torch.increment_version, probes, NULL)
                             : NULL;
        torch.increment_takes_tuple = done != NULL;
        Py_XDECREF(done);
        Py_XDECREF(probes);
        Py_XDECREF(probe);
        PyErr_Clear();
        torch.raw_stream = PyObject_GetAttrString(c, "_cuda_getCurrentRawStream");
        Py_DECREF(c);
    }
    PyErr_Clear(); /* a CPU-only torch has no CUDA stream getter */
    int plain;
    torch.api = nt_api_of((PyTypeObject *)torch.tensor_type, &plain);
    Py_DECREF(module);
    torch.ready = 1;
    return 0;
fail:
    Py_DECREF(module);
    return -1;
}

int nt_force_python_api(int force) {
    int previous = torch.force_python;
    torch.force_python = force;
    return previous;
}

/* Whether `type` overrides torch.Tensor's __torch_dispatch__ (a classmethod: its
 * function is compared). */
static int nt_overrides_dispatch(PyTypeObject *type) {
    if (torch.plain_dispatch == NULL)
        return 0;
    PyObject *mine = PyObject_GetAttr((PyObject *)type, torch.s_torch_dispatch);
    if (mine == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *function = PyObject_GetAttr(mine, torch.s_func);
    PyErr_Clear();
    int overrides = (function != NULL ? function : mine) != torch.plain_dispatch;
    Py_XDECREF(function);
    Py_DECREF(mine);
    return overrides;
}

/* The exchange API published on `type` (looked up once per type), or NULL; and
 * whether the type overrides __torch_dispatch__. */
static const nt_dl_api *nt_api_of(PyTypeObject *type, int *dispatch) {
    for (int t = 0; t < torch.num_api_types; t++)
        if (torch.api_types[t] == type) {
            *dispatch = torch.dispatches[t];
            return torch.apis[t];
        }
    *dispatch = nt_overrides_dispatch(type);
    const nt_dl_api *api = NULL;
    PyObject *capsule = PyObject_GetAttr((PyObject *)type, torch.s_api);
    if (capsule != NULL && PyCapsule_IsValid(capsule, "dlpack_exchange_api")) {
        const nt_dl_header *header = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
        while (header != NULL && header->version.major != NT_DL_MAJOR)
            header = header->prev_api;
        api = (const nt_dl_api *)header;
        if (api != NULL &&
            (api->dltensor_from_py_object_no_sync == NULL || api->current_work_stream == NULL))
            api = NULL;
    }
    Py_XDECREF(capsule); /* torch keeps the table itself alive for the process */
    PyErr_Clear();
    if (torch.num_api_types < NT_API_TYPES) {
        Py_INCREF(type); /* cached by address: the type must outlive the cache */
        torch.api_types[torch.num_api_types] = type;
        torch.dispatches[torch.num_api_types] = *dispatch;
        torch.apis[torch.num_api_types++] = api;
    }
    return api;
}

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
    PyObject *layout = PyObject_GetAttr(object, torch.s_layout);
    PyObject *nested = PyObject_GetAttr(object, torch.s_is_nested);
    int strided = layout == torch.strided && nested != NULL && !PyObject_IsTrue(nested);
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
    PyObject *dtype = PyObject_GetAttr(object, torch.s_dtype);
    PyObject *cuda = PyObject_GetAttr(object, torch.s_is_cuda);
    PyObject *device = PyObject_CallMethodObjArgs(object, torch.s_get_device, NULL);
    PyObject *shape = PyObject_GetAttr(object, torch.s_shape);
    PyObject *stride = PyObject_CallMethodObjArgs(object, torch.s_stride, NULL);
    PyObject *pointer = PyObject_CallMethodObjArgs(object, torch.s_data_ptr, NULL);
    int result = -1;
    if (!dtype || !cuda || !device || !shape || !stride || !pointer)
        goto done;
    t->object = object;
    t->dtype_key = (uint64_t)(uintptr_t)dtype; /* torch dtypes are singletons */
    t->dtype = -1;
    for (uint32_t d = 0; d < nt_num_dtypes; d++)
        if (torch.dtypes[d] == dtype)
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

static int nt_use_python(const nt_state *s) { return torch.force_python || s->python_api; }

/* The kernel writes `owned` in place of the given output `a`; nt_write_back copies. */
static int nt_redirect(nt_state *s, int a, PyObject *given, PyObject *kwargs) {
    PyObject *args = PyTuple_Pack(1, given);
    PyObject *owned = args ? PyObject_Call(torch.empty_like, args, kwargs) : NULL;
    Py_XDECREF(args);
    if (owned == NULL)
        return -1;
    Py_XDECREF(s->owned[a]);
    s->owned[a] = owned;
    s->write_back[a] = given;
    return 1;
}

PyObject *nt_given(const nt_state *s, int a) {
    return s->write_back[a] != NULL ? s->write_back[a] : s->request.tensor[a].object;
}

/* A negative view's memory holds its values negated: an input is read from a
 * resolved copy, an output written through one (what torch's kernels do). */
static int nt_resolve_negative(nt_state *s, int a, PyObject *object) {
    PyObject *negative = nt_builtin_call(&torch.is_neg, object);
    if (negative == NULL)
        return -1;
    int is_negative = PyObject_IsTrue(negative);
    Py_DECREF(negative);
    if (!is_negative)
        return 0;
    if (s->request.group->args[a].flags & NT_OUTPUT)
        return nt_redirect(s, a, object, NULL);
    PyObject *resolved = PyObject_CallMethodObjArgs(object, torch.s_resolve_neg, NULL);
    if (resolved == NULL)
        return -1;
    Py_XDECREF(s->owned[a]);
    s->owned[a] = resolved;
    return 1;
}

static void nt_subclass(const nt_state *s, const char *name, PyObject *object) {
    PyErr_Format(nt_subclass_error,
                 "%s: %s is a %R, a tensor subclass that overrides __torch_dispatch__ "
                 "(a FakeTensor while torch.compile or torch.export traces, a functional "
                 "or a wrapper tensor): its memory is not its data, and prebuilt kernels "
                 "read memory; the public functions send such calls to their torch.library op",
                 s->request.group->op, name, (PyObject *)Py_TYPE(object));
}

/* 1, with SubclassError set, where one of `args` is a tensor subclass that overrides
 * __torch_dispatch__: for calls whose arguments are not read (an op this wheel lacks). */
int nt_refuse_subclasses(const nt_state *s, PyObject *const *args, Py_ssize_t nargs) {
    for (Py_ssize_t a = 0; a < nargs; a++) {
        int dispatch = 0;
        if (PyObject_TypeCheck(args[a], (PyTypeObject *)torch.tensor_type) &&
            Py_TYPE(args[a]) != (PyTypeObject *)torch.tensor_type)
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
    if (!PyObject_TypeCheck(object, (PyTypeObject *)torch.tensor_type)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a torch.Tensor, not %R", s->request.group->op,
                     s->request.group->args[a].name, (PyObject *)Py_TYPE(object));
        return -1;
    }
    int dispatch = 0;
    const nt_dl_api *api = Py_TYPE(object) == (PyTypeObject *)torch.tensor_type
                               ? torch.api
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
    if (!nt_use_python(s)) {
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
            if (nt_read_tensor(s, a, args[a]))
                return -1;
        }
    }
    return 0;
}

PyObject *nt_dtype_object(const nt_tensor *tensor) {
    return PyObject_GetAttr(tensor->object, torch.s_dtype);
}

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
            if (nt_redirect(s, a, t->object, torch.dtype_kwargs[g->args[a].dtype]) < 0 ||
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
    int inference_mode = nt_true(nt_builtin_call(&torch.is_inference_mode_enabled, NULL));
    if (inference_mode)
        return inference_mode < 0 ? -1 : 0;
    int grad_mode = nt_true(nt_builtin_call(&torch.is_grad_enabled, NULL));
    if (grad_mode < 0)
        return -1;
    for (int a = 0; a < g->num_args; a++) {
        PyObject *out = nt_given(s, a);
        if (!(g->args[a].flags & NT_OUTPUT) || out == NULL)
            continue;
        /* `_version`, an attribute, costs less than is_inference(), a method that
         * releases the GIL; only inference tensors have no version counter to read. */
        PyObject *version = PyObject_GetAttr(out, torch.s_version);
        if (version != NULL) {
            Py_DECREF(version);
            continue;
        }
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int inference = nt_true(nt_builtin_call(&torch.is_inference, out));
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
        int grad = nt_true(PyObject_GetAttr(nt_given(s, a), torch.s_requires_grad));
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

/* After a write into tensors the caller gave: their autograd version counters move,
 * as torch's own in-place ops move them, so a saved tensor's later use notices. */
int nt_bump_versions(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (int a = 0; a < g->num_args; a++) {
        PyObject *out = s->request.tensor[a].object;
        if (!(g->args[a].flags & NT_OUTPUT) || out == NULL || s->allocated[a] != NULL ||
            torch.increment_version == NULL)
            continue;
        PyObject *outs = torch.increment_takes_tuple ? PyTuple_Pack(1, out) : Py_NewRef(out);
        PyObject *done = NULL;
        if (outs != NULL && torch.increment_function != NULL)
            done = torch.increment_function(PyCFunction_GetSelf(torch.increment_version), outs);
        else if (outs != NULL)
            done = PyObject_CallFunctionObjArgs(torch.increment_version, outs, NULL);
        Py_XDECREF(outs);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
    }
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
        out = PyObject_CallFunctionObjArgs(torch.empty_like, like->object, NULL);
    } else {
        /* A tuple is filled before anything else holds it: PyTuple_SetItem refuses
         * tuples that are shared. */
        PyObject *shape = PyTuple_New(ndim);
        for (int d = 0; shape != NULL && d < ndim; d++) {
            PyObject *size_object = PyLong_FromLongLong(size[d]);
            if (size_object == NULL || PyTuple_SetItem(shape, d, size_object)) {
                Py_CLEAR(shape);
            }
        }
        PyObject *method = shape ? PyObject_GetAttr(like->object, torch.s_new_empty) : NULL;
        PyObject *args = method ? PyTuple_Pack(1, shape) : NULL;
        out = args ? PyObject_Call(method, args, dtype >= 0 ? torch.dtype_kwargs[dtype] : NULL)
                   : NULL;
        Py_XDECREF(args);
        Py_XDECREF(method);
        Py_XDECREF(shape);
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

int nt_current_stream(int device, CUstream *stream) {
    if (torch.api != NULL && !torch.force_python) {
        void *handle = NULL;
        if (torch.api->current_work_stream(NT_DL_CUDA, device, &handle) != 0)
            return -1;
        *stream = (CUstream)handle;
        return 0;
    }
    PyObject *handle;
    if (torch.raw_stream != NULL) {
        handle = PyObject_CallFunction(torch.raw_stream, "i", device);
    } else {
        PyObject *cuda = PyImport_ImportModule("torch.cuda");
        PyObject *current = cuda ? PyObject_CallMethod(cuda, "current_stream", "i", device) : NULL;
        handle = current ? PyObject_GetAttr(current, torch.s_cuda_stream) : NULL;
        Py_XDECREF(current);
        Py_XDECREF(cuda);
    }
    if (handle == NULL)
        return -1;
    *stream = (CUstream)PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    return PyErr_Occurred() ? -1 : 0;
}
