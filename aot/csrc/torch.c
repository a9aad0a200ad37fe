/* torch, as the binding reaches it: its objects and attribute names, looked up once by
 * nt_torch_init; which tensor types publish DLPack's C exchange API and which override
 * __torch_dispatch__; and torch's current stream.
 *
 * Reading a tensor through its Python API instead of the exchange API (dtype, device,
 * shape, stride(), data_ptr()) takes several Python calls per tensor, which on the H200
 * test machine cost more than the kernel launch itself. That path remains for torch
 * versions without the exchange API and for tensors it declines (meta tensors, say). */
#include "binding.h"

nt_torch_objects nt_torch;

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

/* The attribute names the launcher looks up, interned once. */
static int nt_intern_names(void) {
    static const struct {
        PyObject **name;
        const char *text;
    } names[] = {
        {&nt_torch.s_dtype, "dtype"},
        {&nt_torch.s_data_ptr, "data_ptr"},
        {&nt_torch.s_shape, "shape"},
        {&nt_torch.s_stride, "stride"},
        {&nt_torch.s_get_device, "get_device"},
        {&nt_torch.s_is_cuda, "is_cuda"},
        {&nt_torch.s_new_empty_strided, "new_empty_strided"},
        {&nt_torch.s_cuda_stream, "cuda_stream"},
        {&nt_torch.s_api, "__dlpack_c_exchange_api__"},
        {&nt_torch.s_torch_dispatch, "__torch_dispatch__"},
        {&nt_torch.s_func, "__func__"},
        {&nt_torch.s_is_neg, "is_neg"},
        {&nt_torch.s_resolve_neg, "resolve_neg"},
        {&nt_torch.s_requires_grad, "requires_grad"},
        {&nt_torch.s_is_inference, "is_inference"},
        {&nt_torch.s_layout, "layout"},
        {&nt_torch.s_is_nested, "is_nested"},
        {&nt_torch.s_version, "_version"},
    };
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
        if ((*names[n].name = PyUnicode_InternFromString(names[n].text)) == NULL)
            return -1;
    return 0;
}

/* The builtins every launch calls: the autograd modes, and two tensor methods (bound
 * to a scratch tensor to find their C functions). */
static int nt_find_builtins(PyObject *module) {
    PyObject *grad_enabled = PyObject_GetAttrString(module, "is_grad_enabled");
    PyObject *inference_enabled = PyObject_GetAttrString(module, "is_inference_mode_enabled");
    PyObject *sample = PyObject_CallMethod(module, "empty", "i", 0);
    if (grad_enabled == NULL || inference_enabled == NULL || sample == NULL) {
        Py_XDECREF(sample);
        return -1;
    }
    nt_builtin_init(&nt_torch.is_grad_enabled, grad_enabled, grad_enabled, NULL, 0);
    nt_builtin_init(&nt_torch.is_inference_mode_enabled, inference_enabled, inference_enabled, NULL,
                    0);
    PyObject *bound = PyObject_GetAttr(sample, nt_torch.s_is_neg);
    nt_builtin_init(&nt_torch.is_neg, bound, NULL, nt_torch.s_is_neg, 1);
    Py_XDECREF(bound);
    bound = PyObject_GetAttr(sample, nt_torch.s_is_inference);
    nt_builtin_init(&nt_torch.is_inference, bound, NULL, nt_torch.s_is_inference, 1);
    Py_XDECREF(bound);
    Py_DECREF(sample);
    return 0;
}

/* torch._C's: _increment_version, and which argument this torch's takes (asked once,
 * of a scratch tensor, rather than failing a write later); the CUDA stream getter. */
static void nt_find_internals(PyObject *module) {
    PyObject *c = PyObject_GetAttrString(module, "_C");
    if (c != NULL) {
        nt_torch.increment_version = PyObject_GetAttrString(c, "_increment_version");
        if (nt_torch.increment_version != NULL && PyCFunction_Check(nt_torch.increment_version) &&
            (PyCFunction_GetFlags(nt_torch.increment_version) & ~METH_COEXIST) == METH_O)
            nt_torch.increment_function = PyCFunction_GetFunction(nt_torch.increment_version);
        PyErr_Clear();
        PyObject *probe = PyObject_CallMethod(module, "empty", "i", 0);
        PyObject *probes = probe ? PyTuple_Pack(1, probe) : NULL;
        PyObject *done =
            probes && nt_torch.increment_version
                ? PyObject_CallFunctionObjArgs(nt_torch.increment_version, probes, NULL)
                : NULL;
        nt_torch.increment_takes_tuple = done != NULL;
        Py_XDECREF(done);
        Py_XDECREF(probes);
        Py_XDECREF(probe);
        PyErr_Clear();
        nt_torch.raw_stream = PyObject_GetAttrString(c, "_cuda_getCurrentRawStream");
        Py_DECREF(c);
    }
    PyErr_Clear(); /* a CPU-only torch has no CUDA stream getter */
}

/* The exchange API published on `type`, or NULL. */
static const nt_dl_api *nt_exchange_api(PyTypeObject *type) {
    const nt_dl_api *api = NULL;
    PyObject *capsule = PyObject_GetAttr((PyObject *)type, nt_torch.s_api);
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
    return api;
}

int nt_torch_init(void) {
    if (nt_torch.ready)
        return 0;
    PyObject *module = PyImport_ImportModule("torch");
    if (module == NULL)
        return -1;
    if (nt_intern_names())
        goto fail;
    nt_torch.tensor_type = PyObject_GetAttrString(module, "Tensor");
    nt_torch.empty_like = PyObject_GetAttrString(module, "empty_like");
    nt_torch.strided = PyObject_GetAttrString(module, "strided");
    if (nt_torch.tensor_type == NULL || nt_torch.empty_like == NULL || nt_torch.strided == NULL ||
        nt_find_builtins(module))
        goto fail;
    nt_torch.plain_dispatch = PyObject_GetAttr(nt_torch.tensor_type, nt_torch.s_torch_dispatch);
    PyErr_Clear(); /* a torch without __torch_dispatch__ has no such subclasses */
    for (uint32_t d = 0; d < nt_num_dtypes; d++) {
        if ((nt_torch.dtypes[d] = PyObject_GetAttrString(module, nt_dtypes[d].torch_name)) ==
                NULL ||
            (nt_torch.dtype_kwargs[d] = PyDict_New()) == NULL ||
            PyDict_SetItem(nt_torch.dtype_kwargs[d], nt_torch.s_dtype, nt_torch.dtypes[d]))
            goto fail;
    }
    nt_find_internals(module);
    nt_torch.exchange_api = nt_exchange_api((PyTypeObject *)nt_torch.tensor_type);
    nt_torch.api = nt_torch.exchange_api;
    Py_DECREF(module);
    nt_torch.ready = 1;
    return 0;
fail:
    Py_DECREF(module);
    return -1;
}

/* Whether `type` overrides torch.Tensor's __torch_dispatch__ (a classmethod: its
 * function is compared). */
static int nt_overrides_dispatch(PyTypeObject *type) {
    if (nt_torch.plain_dispatch == NULL)
        return 0;
    PyObject *mine = PyObject_GetAttr((PyObject *)type, nt_torch.s_torch_dispatch);
    if (mine == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *function = PyObject_GetAttr(mine, nt_torch.s_func);
    PyErr_Clear();
    int overrides = (function != NULL ? function : mine) != nt_torch.plain_dispatch;
    Py_XDECREF(function);
    Py_DECREF(mine);
    return overrides;
}

/* A subclass reads through its own exchange API only while torch.Tensor's is the one
 * readers take (nt_torch.api): every tensor of a call is read one way. */
const nt_dl_api *nt_api_of(PyTypeObject *type, int *dispatch) {
    for (int t = 0; t < nt_torch.num_api_types; t++)
        if (nt_torch.api_types[t] == type) {
            *dispatch = nt_torch.dispatches[t];
            return nt_torch.apis[t];
        }
    *dispatch = nt_overrides_dispatch(type);
    const nt_dl_api *api = nt_torch.api != NULL ? nt_exchange_api(type) : NULL;
    if (nt_torch.num_api_types < NT_API_TYPES) {
        Py_INCREF(type); /* cached by address: the type must outlive the cache */
        nt_torch.api_types[nt_torch.num_api_types] = type;
        nt_torch.dispatches[nt_torch.num_api_types] = *dispatch;
        nt_torch.apis[nt_torch.num_api_types++] = api;
    }
    return api;
}

/* The readers take the exchange API (where torch has one) or, with `use` 0, torch's
 * Python API: the types' cached APIs follow, looked up again as they come. */
void nt_use_exchange_api(int use) {
    nt_torch.api = use ? nt_torch.exchange_api : NULL;
    while (nt_torch.num_api_types > 0)
        Py_DECREF(nt_torch.api_types[--nt_torch.num_api_types]);
}

int nt_current_stream(int device, CUstream *stream) {
    if (nt_torch.api != NULL) {
        void *handle = NULL;
        if (nt_torch.api->current_work_stream(NT_DL_CUDA, device, &handle) != 0)
            return -1;
        *stream = (CUstream)handle;
        return 0;
    }
    PyObject *handle;
    if (nt_torch.raw_stream != NULL) {
        handle = PyObject_CallFunction(nt_torch.raw_stream, "i", device);
    } else {
        PyObject *cuda = PyImport_ImportModule("torch.cuda");
        PyObject *current = cuda ? PyObject_CallMethod(cuda, "current_stream", "i", device) : NULL;
        handle = current ? PyObject_GetAttr(current, nt_torch.s_cuda_stream) : NULL;
        Py_XDECREF(current);
        Py_XDECREF(cuda);
    }
    if (handle == NULL)
        return -1;
    *stream = (CUstream)PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    return PyErr_Occurred() ? -1 : 0;
}

PyObject *nt_dtype_object(const nt_tensor *tensor) {
    return PyObject_GetAttr(tensor->object, nt_torch.s_dtype);
}
