/* The module ntops_prebuilt._C: its method table and init, and the entry points that
 * are not a call (call.c) or a test's (debug.c): the wheel's groups, kernels and
 * images, preloading a device, and the two facts the Python runtime asks of the
 * binding rather than knowing them twice (which tensor types override
 * __torch_dispatch__, how torch moves version counters); the composite ops' argument
 * rules are rules.c's. */
#include <string.h>

#include "binding.h"

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
        nt_cuda_fail("preload", failed, what, result);
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

/* overrides_dispatch(type) -> whether tensor type `type` overrides __torch_dispatch__
 * (the launcher refuses such tensors: their memory is not their data) */
static PyObject *nt_py_overrides_dispatch(PyObject *self, PyObject *type) {
    (void)self;
    if (!PyType_Check(type))
        return PyErr_Format(PyExc_TypeError, "overrides_dispatch(type): not a type: %R", type);
    if (nt_torch_init())
        return NULL;
    int dispatch = 0;
    if (type != nt_torch.tensor_type)
        nt_api_of((PyTypeObject *)type, &dispatch);
    return PyBool_FromLong(dispatch);
}

/* increment_versions(tensors) -> None: the tensors' autograd version counters move, as
 * a launch that writes them moves them */
static PyObject *nt_py_increment_versions(PyObject *self, PyObject *tensors) {
    (void)self;
    if (nt_torch_init() || nt_increment_versions(tensors))
        return NULL;
    Py_RETURN_NONE;
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
    {"_phases", (PyCFunction)(void (*)(void))nt_py_phases, METH_FASTCALL,
     "_phases(group, repeats, *args)\n--\n\nMean ns of each step of `repeats` launches."},
    {"_candidate", nt_py_candidate, METH_O,
     "_candidate(index)\n--\n\nLaunch only this tuning candidate (-1: any); returns the last."},
    {"_fault_next_load", nt_py_fault_next_load, METH_O,
     "_fault_next_load(stage)\n--\n\nFail the next module load (tests); returns modules loaded."},
    {"_force_python_api", nt_py_force_python_api, METH_O,
     "_force_python_api(force)\n--\n\nRead tensors through torch's Python API (tests)."},
    {"last_kernel", nt_py_last_kernel, METH_NOARGS,
     "last_kernel()\n--\n\nId of the kernel this thread launched last, or None."},
    {"overrides_dispatch", nt_py_overrides_dispatch, METH_O,
     "overrides_dispatch(type)\n--\n\nWhether a tensor type overrides __torch_dispatch__."},
    {"attention_rules", (PyCFunction)(void (*)(void))nt_py_attention_rules, METH_FASTCALL,
     "attention_rules(query, key, value, present_key, present_value, key_slot, value_slot, "
     "enable_gqa, head_dims, most)\n--\n\n"
     "scaled_dot_product_attention's argument rules; None: Python checks the call."},
    {"rotary_rules", (PyCFunction)(void (*)(void))nt_py_rotary_rules, METH_FASTCALL,
     "rotary_rules(input, sin_table, cos_table, inplace)\n--\n\n"
     "rotary_position_embedding's shape rules and result; None: Python checks the call."},
    {"rms_norm_rules", (PyCFunction)(void (*)(void))nt_py_rms_norm_rules, METH_FASTCALL,
     "rms_norm_rules(input, normalized_shape, weight)\n--\n\n"
     "rms_norm's rules over the last dim and its welford switch; None: Python checks."},
    {"increment_versions", nt_py_increment_versions, METH_O,
     "increment_versions(tensors)\n--\n\nMove the version counters of a tuple of tensors."},
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
    if (nt_add_errors(module)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
