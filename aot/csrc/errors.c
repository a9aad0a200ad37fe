/* How the launcher fails: every failure becomes a Python exception, of the kind torch
 * would raise, or one of the module's own (CudaError, SubclassError); nothing prints
 * or exits. A call the wheel has no kernel for is explained by ntops_prebuilt._errors,
 * which knows what the wheel has and the command that builds the rest. */
#include "binding.h"

PyObject *nt_cuda_error;
PyObject *nt_subclass_error;

static PyObject *nt_add_error(PyObject *module, const char *name, const char *doc, PyObject *base) {
    char qualified[64];
    snprintf(qualified, sizeof qualified, "ntops_prebuilt.%s", name);
    PyObject *error = PyErr_NewExceptionWithDoc(qualified, doc, base, NULL);
    if (error == NULL || PyModule_AddObject(module, name, error))
        return NULL;
    Py_INCREF(error);
    return error;
}

int nt_add_errors(PyObject *module) {
    nt_cuda_error = nt_add_error(
        module, "CudaError",
        "A CUDA driver call failed; the message names the op, the kernel and the error.",
        PyExc_RuntimeError);
    if (nt_cuda_error == NULL)
        return -1;
    nt_subclass_error = nt_add_error(
        module, "SubclassError",
        "A tensor argument is a subclass that overrides __torch_dispatch__ (a FakeTensor, "
        "a functional or a wrapper tensor): the public functions send such calls to their "
        "torch.library ops.",
        PyExc_TypeError);
    return nt_subclass_error == NULL ? -1 : 0;
}

int nt_raise(const nt_error *error) {
    PyErr_SetString(error->kind == NT_TYPE_ERROR ? PyExc_TypeError : PyExc_ValueError,
                    error->message);
    return -1;
}

int nt_cuda_fail(const char *where, const char *kernel, const char *what, CUresult result) {
    PyErr_Format(nt_cuda_error, "%s: %s: %s failed: %s (%s)", where, kernel, what,
                 nt_error_name(result), nt_error_string(result));
    return -1;
}

void nt_subclass(const nt_state *s, const char *name, PyObject *object) {
    PyErr_Format(nt_subclass_error,
                 "%s: %s is a %R, a tensor subclass that overrides __torch_dispatch__ "
                 "(a FakeTensor while torch.compile or torch.export traces, a functional "
                 "or a wrapper tensor): its memory is not its data, and prebuilt kernels "
                 "read memory; the public functions send such calls to their torch.library op",
                 s->request.group->op, name, (PyObject *)Py_TYPE(object));
}

/* The wheel has nothing for this call: ntops_prebuilt._errors explains what it has. */
void nt_not_built(const nt_state *s, int capability) {
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
