/* The Python entry points of ntops_prebuilt._C, on the limited API (abi3): the
 * binding's half of a call around the core's.
 *
 * A call reads each tensor's dtype, device, shape, strides and data pointer (tensors.c),
 * checks their shapes (shapes.c), merges dims that are contiguous in every tensor
 * (layout.c), picks the most specialised prebuilt kernel whose assumptions hold and
 * launches it (launch.c) on torch's current stream of the tensors' device. Every failure
 * becomes a Python exception; nothing prints or exits. */
#include <stdatomic.h>
#include <string.h>

#include "binding.h"

static PyObject *nt_cuda_error;
PyObject *nt_subclass_error;
/* The kernel this thread launched last: lets tests see which specialisation ran. */
static _Thread_local const nt_kernel *nt_last_kernel;

static void nt_state_init(nt_state *s, const nt_group *group, int plan) {
    nt_request *r = &s->request;
    r->group = group;
    r->plan = plan;
    r->empty = 0;
    r->call.ndim = 0; /* unknown until the call is shaped: a not-built error may come first */
    r->call.dtype = -1;
    r->call.workspace = 0; /* a launch allocates it; a plan shows 0 */
    r->call.launch = 0;
    r->has_given = 0;
    s->python_api = 0;
    for (int a = 0; a < NT_MAX_ARGS; a++) {
        r->tensor[a].object = NULL;
        s->allocated[a] = NULL;
        s->owned[a] = NULL;
        s->write_back[a] = NULL;
    }
}

int nt_raise(const nt_error *error) {
    PyErr_SetString(error->kind == NT_TYPE_ERROR ? PyExc_TypeError : PyExc_ValueError,
                    error->message);
    return -1;
}

static const nt_group *nt_group_arg(PyObject *object) {
    long index = PyLong_AsLong(object);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < 0 || (unsigned long)index >= nt_num_groups) {
        PyErr_Format(PyExc_ValueError, "no group %ld in this wheel", index);
        return NULL;
    }
    return &nt_groups[index];
}

/* The wheel has nothing for this call: ntops_prebuilt._errors explains what it has. */
static void nt_not_built(const nt_state *s, int capability) {
    const nt_request *r = &s->request;
    PyObject *errors = PyImport_ImportModule("ntops_prebuilt._errors");
    if (errors == NULL)
        return;
    PyObject *dtype = NULL;
    for (int a = 0; a < r->group->num_args && dtype == NULL; a++)
        if (r->tensor[a].object != NULL)
            dtype = nt_dtype_object(&r->tensor[a]);
    PyErr_Clear();
    PyObject *error = PyObject_CallMethod(
        errors, "not_built", "siOi", r->group->key, capability, dtype ? dtype : Py_None,
        r->group->coalesce == NT_COALESCE_NONE ? 0 : r->call.ndim);
    Py_XDECREF(dtype);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    Py_DECREF(errors);
}

/* The whole of a call up to the choice of kernel: the binding reads and checks what
 * only torch can tell, the core the shapes; outputs are allocated between the two. */
static int nt_prepare(nt_state *s, PyObject *const *args, Py_ssize_t nargs) {
    nt_request *r = &s->request;
    if (nt_torch_init())
        return -1;
    if (r->group->num_kernels == 0) {              /* an op this wheel was built without */
        if (!nt_refuse_subclasses(s, args, nargs)) /* those go to the op, built or not */
            nt_not_built(s, -1);
        return -1;
    }
    if (nt_read_args(s, args, nargs) || nt_check_devices_and_dtypes(s) || nt_check_writes(s))
        return -1;
    if (nt_check_shapes(r))
        return nt_raise(&r->error);
    if (nt_allocate_outputs(s))
        return -1;
    return nt_layout(r) ? nt_raise(&r->error) : 0;
}

static int nt_cuda_fail(const nt_request *r, const char *kernel, const char *what,
                        CUresult result) {
    PyErr_Format(nt_cuda_error, "%s: %s: %s failed: %s (%s)", r->group->op, kernel, what,
                 nt_error_name(result), nt_error_string(result));
    return -1;
}

/* Once per process, when the driver first JIT-compiles PTX: that costs time at
 * first use (and compiles again in every new process unless its JIT cache keeps it). */
static atomic_int nt_ptx_warned;

static int nt_warn_ptx(const nt_device *device, const nt_kernel *kernel) {
    if (atomic_exchange(&nt_ptx_warned, 1))
        return 0;
    return PyErr_WarnFormat(
        PyExc_RuntimeWarning, 1,
        "ntops_prebuilt: this wheel has no cubin for sm_%d; the CUDA driver is JIT-compiling "
        "the PTX of sm_%d it was built with (--ptx), starting with %s. Build with --arch sm_%d "
        "for kernels that load without compiling.",
        device->capability, kernel->capability, kernel->id, device->capability);
}

/* Kernel `index` as a function of the call's device: its first use there loads the
 * module, without holding the GIL. */
static int nt_loaded(const nt_request *r, const nt_device *device, uint32_t index,
                     CUfunction *function) {
    if ((*function = nt_function_loaded(device, index)) != NULL)
        return 0;
    const char *what = "";
    CUresult result;
    Py_BEGIN_ALLOW_THREADS
    result = nt_function(device, index, function, &what);
    Py_END_ALLOW_THREADS
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r, nt_kernels[index].id, what, result);
    return nt_kernels[index].ptx ? nt_warn_ptx(device, &nt_kernels[index]) : 0;
}

static int nt_run(nt_state *s) {
    nt_request *r = &s->request;
    const char *what = "";
    const nt_device *device;
    CUresult result = nt_driver_load(&what);
    if (result == CUDA_SUCCESS)
        result = nt_device_get(r->call.device, &device, &what);
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r, "loading the CUDA driver", what, result);
    r->call.capability = device->capability;
    r->call.multiprocessors = device->multiprocessors;
    r->call.launch = nt_next_launch();
    uint32_t index;
    if (!nt_select(r, device->arches, device->num_arches, &index)) {
        nt_not_built(s, device->capability);
        return -1;
    }
    const nt_kernel *kernel = &nt_kernels[index];
    int64_t grid = kernel->grid(&r->call);
    if (grid <= 0)
        return 0;
    if (grid > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %s would need %lld programs; CUDA allows %d",
                     r->group->op, kernel->id, (long long)grid, INT32_MAX);
        return -1;
    }
    CUstream stream;
    CUfunction function;
    if (nt_current_stream(r->call.device, &stream) || nt_loaded(r, device, index, &function))
        return -1;
    result = nt_launch_call(device, kernel, function, grid, stream, &r->call, &what);
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r, kernel->id, what, result);
    nt_last_kernel = kernel;
    return 0;
}

static void nt_release(nt_state *s) {
    for (int a = 0; a < s->request.group->num_args; a++) {
        Py_XDECREF(s->allocated[a]);
        Py_XDECREF(s->owned[a]);
    }
}

static PyObject *nt_first_output(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (int a = 0; a < g->num_args; a++)
        if (g->args[a].flags & NT_OUTPUT) {
            PyObject *out = nt_given(s, a);
            Py_INCREF(out);
            return out;
        }
    Py_RETURN_NONE;
}

/* An empty call launches nothing, but only where the wheel has the op for its
 * dtype: an empty tensor of a dtype no kernel takes is refused as a full one is. */
static int nt_has_dtype(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (uint32_t k = g->first_kernel; k < g->first_kernel + g->num_kernels; k++)
        if (nt_kernels[k].dtype == s->request.call.dtype)
            return 1;
    nt_not_built(s, -1);
    return 0;
}

/* launch(group, *args) -> the (first) output tensor */
static PyObject *nt_py_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1)
        return PyErr_Format(PyExc_TypeError, "launch(group, *args)");
    const nt_group *group = nt_group_arg(args[0]);
    if (group == NULL)
        return NULL;
    nt_state s;
    nt_state_init(&s, group, 0);
    PyObject *result = NULL;
    const nt_request *r = &s.request;
    if (nt_prepare(&s, args + 1, nargs - 1) == 0 && (!r->empty || nt_has_dtype(&s)) &&
        (r->empty || nt_run(&s) == 0) && nt_write_back(&s) == 0 && nt_bump_versions(&s) == 0)
        result = nt_first_output(&s);
    nt_release(&s);
    return result;
}

/* The values a launch of `kernel` would pass it, as Python numbers. */
static PyObject *nt_param_values(const nt_kernel *kernel, const nt_call *call) {
    PyObject *params = PyList_New(0);
    for (int n = 0; params != NULL && n < kernel->num_params; n++) {
        int64_t integer = 0;
        double real = 0;
        PyObject *value = nt_value(call, &kernel->params[n], &integer, &real)
                              ? PyFloat_FromDouble(real)
                              : PyLong_FromLongLong(integer);
        if (value == NULL || PyList_Append(params, value))
            Py_CLEAR(params);
        Py_XDECREF(value);
    }
    return params;
}

/* plan(group, capability, *args) -> {kernel, grid, params, ndim, width}: the
 * launch a call would make on a device of that capability, made without one. */
static PyObject *nt_py_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2)
        return PyErr_Format(PyExc_TypeError, "plan(group, capability, *args)");
    const nt_group *group = nt_group_arg(args[0]);
    if (group == NULL)
        return NULL;
    nt_state s;
    nt_state_init(&s, group, 1);
    nt_request *r = &s.request;
    int capability = (int)PyLong_AsLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *result = NULL;
    if (nt_prepare(&s, args + 2, nargs - 2))
        goto done;
    uint16_t arches[NT_MAX_ARCHES];
    int num_arches = nt_arches_for(capability, arches);
    r->call.capability = capability;
    r->call.multiprocessors = nt_default_multiprocessors(capability);
    uint32_t index;
    if (!nt_select(r, arches, num_arches, &index)) {
        nt_not_built(&s, capability);
        goto done;
    }
    const nt_kernel *kernel = &nt_kernels[index];
    PyObject *params = nt_param_values(kernel, &r->call);
    if (params == NULL)
        goto done;
    result = Py_BuildValue("{s:s,s:L,s:N,s:i,s:i,s:O,s:(LL),s:i,s:I,s:I,s:i}", "kernel", kernel->id,
                           "grid", (long long)(r->empty ? 0 : kernel->grid(&r->call)), "params",
                           params, "ndim", r->call.ndim, "width", r->call.width, "empty",
                           r->empty ? Py_True : Py_False, "bucket_keys",
                           (long long)nt_bucket_key(r, 0), (long long)nt_bucket_key(r, 1),
                           "num_warps", kernel->num_warps, "scratch", kernel->scratch, "workspace",
                           kernel->workspace, "num_ctas", kernel->num_ctas);
done:
    nt_release(&s);
    return result;
}

/* group(key) -> index for launch() and plan() */
static PyObject *nt_py_group(PyObject *self, PyObject *key) {
    (void)self;
    const char *name = PyUnicode_AsUTF8AndSize(key, NULL);
    if (name == NULL)
        return NULL;
    for (uint32_t g = 0; g < nt_num_groups; g++)
        if (strcmp(nt_groups[g].key, name) == 0)
            return PyLong_FromUnsignedLong(g);
    PyErr_Format(PyExc_KeyError, "%R: no such op in this wheel's registry", key);
    return NULL;
}

/* preload(device) -> number of modules loaded for that CUDA device */
static PyObject *nt_py_preload(PyObject *self, PyObject *arg) {
    (void)self;
    int ordinal = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred())
        return NULL;
    const char *what = "";
    const nt_device *device;
    CUresult result = nt_driver_load(&what);
    if (result == CUDA_SUCCESS)
        result = nt_device_get(ordinal, &device, &what);
    long loaded = 0;
    const char *failed = "loading the CUDA driver";
    for (uint32_t k = 0; k < nt_num_kernels && result == CUDA_SUCCESS; k++) {
        int usable = 0;
        for (int a = 0; a < device->num_arches; a++)
            usable |= device->arches[a] == nt_kernel_arch(&nt_kernels[k]);
        if (!usable)
            continue;
        CUfunction function;
        Py_BEGIN_ALLOW_THREADS
        result = nt_function(device, k, &function, &what);
        Py_END_ALLOW_THREADS
        failed = nt_kernels[k].id;
        loaded++;
        if (result == CUDA_SUCCESS && nt_kernels[k].ptx && nt_warn_ptx(device, &nt_kernels[k]))
            return NULL;
    }
    if (result != CUDA_SUCCESS) {
        PyErr_Format(nt_cuda_error, "preload: %s: %s failed: %s (%s)", failed, what,
                     nt_error_name(result), nt_error_string(result));
        return NULL;
    }
    return PyLong_FromLong(loaded);
}

/* kernels() -> ids of every kernel in this extension, in table order */
static PyObject *nt_py_kernels(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *ids = PyList_New(0);
    for (uint32_t k = 0; ids != NULL && k < nt_num_kernels; k++) {
        PyObject *id = PyUnicode_FromString(nt_kernels[k].id);
        if (id == NULL || PyList_Append(ids, id)) {
            Py_XDECREF(id);
            Py_CLEAR(ids);
            break;
        }
        Py_DECREF(id);
    }
    return ids;
}

/* image(index) -> the cubin (or NUL-terminated PTX) embedded for kernel `index` of
 * kernels(): the very bytes cuModuleLoadData gets, for tools such as cuobjdump. */
static PyObject *nt_py_image(PyObject *self, PyObject *arg) {
    (void)self;
    long index = PyLong_AsLong(arg);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < 0 || (unsigned long)index >= nt_num_kernels)
        return PyErr_Format(PyExc_IndexError, "image(%ld): the extension has %u kernels", index,
                            (unsigned)nt_num_kernels);
    return PyBytes_FromStringAndSize((const char *)nt_kernels[index].cubin,
                                     (Py_ssize_t)nt_image_sizes[index]);
}

/* last_kernel() -> id of the kernel this thread launched last, or None */
static PyObject *nt_py_last_kernel(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (nt_last_kernel == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(nt_last_kernel->id);
}

/* _candidate(index) -> previous setting: launch only kernels built as candidate
 * `index` of their bucket (a tuning wheel's); -1 lifts it. Per thread. */
static PyObject *nt_py_candidate(PyObject *self, PyObject *arg) {
    (void)self;
    long index = PyLong_AsLong(arg);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < -1 || index > UINT16_MAX)
        return PyErr_Format(PyExc_ValueError, "_candidate(%ld): expected -1 or an index", index);
    return PyLong_FromLong(nt_set_candidate((int)index));
}

/* _force_python_api(force) -> previous setting: read tensors through torch's Python
 * API even where the DLPack exchange API is available (for tests of that path). */
static PyObject *nt_py_force_python_api(PyObject *self, PyObject *arg) {
    (void)self;
    int force = PyObject_IsTrue(arg);
    if (force < 0 || nt_torch_init())
        return NULL;
    return PyBool_FromLong(nt_force_python_api(force));
}

/* _fault_next_load(stage) -> modules loaded now: the next module load fails after
 * loading (1: at cuModuleGetFunction, 2: at the shared-memory opt-in), for tests
 * that a failed load leaves nothing behind. */
static PyObject *nt_py_fault_next_load(PyObject *self, PyObject *arg) {
    (void)self;
    long stage = PyLong_AsLong(arg);
    if (stage == -1 && PyErr_Occurred())
        return NULL;
    nt_fault_next_load((int)stage);
    return PyLong_FromLong(nt_loaded_modules());
}

static PyMethodDef nt_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))nt_py_launch, METH_FASTCALL,
     "launch(group, *args)\n--\n\nLaunch the prebuilt kernel for these arguments."},
    {"plan", (PyCFunction)(void (*)(void))nt_py_plan, METH_FASTCALL,
     "plan(group, capability, *args)\n--\n\nThe launch a call would make, without a GPU."},
    {"group", nt_py_group, METH_O, "group(key)\n--\n\nIndex of an op's switch combination."},
    {"preload", nt_py_preload, METH_O, "preload(device)\n--\n\nLoad every module for a device."},
    {"kernels", nt_py_kernels, METH_NOARGS, "kernels()\n--\n\nIds of the embedded kernels."},
    {"image", nt_py_image, METH_O, "image(index)\n--\n\nThe cubin (or PTX) of kernels()[index]."},
    {"_candidate", nt_py_candidate, METH_O,
     "_candidate(index)\n--\n\nLaunch only this tuning candidate (-1: any); returns the last."},
    {"_fault_next_load", nt_py_fault_next_load, METH_O,
     "_fault_next_load(stage)\n--\n\nFail the next module load (tests); returns modules loaded."},
    {"_force_python_api", nt_py_force_python_api, METH_O,
     "_force_python_api(force)\n--\n\nRead tensors through torch's Python API (tests)."},
    {"last_kernel", nt_py_last_kernel, METH_NOARGS,
     "last_kernel()\n--\n\nId of the kernel this thread launched last, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef nt_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_C",
    .m_doc = "Prebuilt ntops kernels and their launcher.",
    .m_size = -1,
    .m_methods = nt_methods,
};

PyMODINIT_FUNC PyInit__C(void); /* the module's one exported symbol */

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *module = PyModule_Create(&nt_module);
    if (module == NULL)
        return NULL;
    nt_cuda_error = PyErr_NewExceptionWithDoc(
        "ntops_prebuilt.CudaError",
        "A CUDA driver call failed; the message names the op, the kernel and the error.",
        PyExc_RuntimeError, NULL);
    if (nt_cuda_error == NULL || PyModule_AddObject(module, "CudaError", nt_cuda_error)) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(nt_cuda_error);
    nt_subclass_error = PyErr_NewExceptionWithDoc(
        "ntops_prebuilt.SubclassError",
        "A tensor argument is a subclass that overrides __torch_dispatch__ (a FakeTensor, "
        "a functional or a wrapper tensor): the public functions send such calls to their "
        "torch.library ops.",
        PyExc_TypeError, NULL);
    if (nt_subclass_error == NULL ||
        PyModule_AddObject(module, "SubclassError", nt_subclass_error)) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(nt_subclass_error);
    return module;
}
