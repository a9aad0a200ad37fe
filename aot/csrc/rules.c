/* The argument rules of composite ops (attention, rotary embeddings, rms_norm) for
 * plain tensors, checked here at C's cost on every eager call: each entry point gives
 * what its Python wrapper needs next, or None, and the wrapper's own checks run only
 * then (a tensor subclass, a rule that fails: Python words every error). Tests hold
 * the two rule sets to the same calls (tests/unit/test_attention_runtime.py,
 * test_native_rules.py). */
#include "binding.h"

static int nt_same_shape(const nt_tensor *t, const nt_tensor *other) {
    if (t->ndim != other->ndim)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->size[d] != other->size[d])
            return 0;
    return 1;
}

/* Equal strides wherever `t` has more than one index (a size-1 dim's is never used). */
static int nt_strides_agree(const nt_tensor *t, const nt_tensor *other) {
    for (int d = 0; d < t->ndim; d++)
        if (t->size[d] != 1 && t->stride[d] != other->stride[d])
            return 0;
    return 1;
}

/* Whether `slot` is the last positions of the (batch, heads, seq, head_dim) `cache`,
 * `present` the same dtype and device as it, at most `most` of them. */
static int nt_is_tail(const nt_tensor *cache, const nt_tensor *present, const nt_tensor *slot,
                      long long most) {
    if (cache->ndim != 4 || slot->ndim != 4 || present->ndim != 4)
        return 0;
    int64_t appended = slot->size[2];
    int64_t bits = cache->dtype_key >> 8 & 0xff; /* the exchange API's dtype key */
    return appended > 0 && appended <= most && appended <= cache->size[2] &&
           slot->size[0] == cache->size[0] && slot->size[1] == cache->size[1] &&
           slot->size[3] == cache->size[3] && nt_strides_agree(slot, cache) &&
           present->dtype_key == cache->dtype_key && present->cuda == cache->cuda &&
           present->device == cache->device &&
           slot->pointer == cache->pointer + (uint64_t)((cache->size[2] - appended) *
                                                        cache->stride[2] * (bits / 8));
}

/* How many new KV-cache entries a decode attention launch writes itself: the slots'
 * positions where they are the caches' last (at most `most`) and the new entries agree
 * (_attention.py's _is_tail); 0 where not. */
static int64_t nt_tail_entries(const nt_tensor *key, const nt_tensor *value,
                               const nt_tensor *present_key, const nt_tensor *present_value,
                               const nt_tensor *key_slot, const nt_tensor *value_slot,
                               long long most) {
    int fused = nt_same_shape(present_key, present_value) &&
                nt_strides_agree(present_key, present_value) &&
                nt_is_tail(key, present_key, key_slot, most) &&
                nt_is_tail(value, present_value, value_slot, most);
    return fused ? key_slot->size[2] : 0;
}

/* A float dtype by the exchange API's key: float (2) or bfloat (4) codes. Others
 * (torch's float8 types among them) are left to Python. */
static int nt_floating(const nt_tensor *t) {
    uint64_t code = t->dtype_key & 0xff;
    return code == 2 || code == 4;
}

/* present/slot: both absent (0), both plain tensors of one shape (1), else -1. */
static int nt_cache_pair(PyObject *present, PyObject *slot, nt_tensor *p, nt_tensor *s) {
    if (present == Py_None && slot == Py_None)
        return 0;
    if (present == Py_None || slot == Py_None || nt_read_plain(present, p) ||
        nt_read_plain(slot, s) || !nt_same_shape(p, s))
        return -1;
    return 1;
}

/* attention_rules(query, key, value, present_key, present_value, key_slot, value_slot,
 * enable_gqa, head_dims, most) -> (fused, out, batch, heads_q, seq_q, head_dim,
 * heads_kv, seq_kv), or None.
 *
 * The argument rules of _attention.py's scaled_dot_product_attention (_sdpa_checks'
 * for the tensors, _check_cache's, and the tail rule of _present), for a call whose
 * tensors are plain torch.Tensors read through the exchange API: where every rule
 * holds, the new entries the launch writes itself (`fused`, 0 for none: the caller
 * copies them), the new result `out` (contiguous, of query's shape) and the shapes.
 * None where a tensor cannot be read here or a rule fails: the caller checks in Python,
 * which raises what fails (one wording of every error) or routes a subclass. */
PyObject *nt_py_attention_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10)
        return PyErr_Format(PyExc_TypeError, "attention_rules takes 10 arguments, got %zd", nargs);
    int gqa = PyObject_IsTrue(args[7]);
    long long most = PyLong_AsLongLong(args[9]);
    if (gqa < 0 || (most == -1 && PyErr_Occurred()) || !PyTuple_Check(args[8]))
        return NULL;
    if (nt_torch_init())
        return NULL;
    nt_tensor t[7];
    for (int a = 0; a < 3; a++)
        if (nt_read_plain(args[a], &t[a]))
            Py_RETURN_NONE;
    const nt_tensor *query = &t[0], *key = &t[1], *value = &t[2];
    if (query->ndim != 4 || key->ndim != 4 || !nt_same_shape(key, value) || !nt_floating(query))
        Py_RETURN_NONE;
    int64_t batch = query->size[0], heads_q = query->size[1], head_dim = query->size[3];
    int64_t heads_kv = key->size[1];
    for (int a = 1; a < 3; a++)
        if (t[a].dtype_key != query->dtype_key || t[a].cuda != query->cuda ||
            t[a].device != query->device)
            Py_RETURN_NONE;
    if (key->size[0] != batch || key->size[3] != head_dim || heads_kv == 0 ||
        (!gqa && heads_q != heads_kv) || heads_q % heads_kv)
        Py_RETURN_NONE;
    int built = 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(args[8]); i++) {
        long long dim = PyLong_AsLongLong(PyTuple_GetItem(args[8], i));
        if (dim == -1 && PyErr_Occurred())
            return NULL;
        built |= dim == head_dim;
    }
    int keys = nt_cache_pair(args[3], args[5], &t[3], &t[5]);
    int values = nt_cache_pair(args[4], args[6], &t[4], &t[6]);
    if (!built || keys < 0 || values < 0)
        Py_RETURN_NONE;
    int64_t fused = 0;
    if (keys && values && query->size[2] <= most)
        fused = nt_tail_entries(key, value, &t[3], &t[4], &t[5], &t[6], most);
    PyObject *out = nt_new_contiguous(args[0], query->size, 4, NULL);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(LNLLLLLL)", (long long)fused, out, (long long)batch, (long long)heads_q,
                         (long long)query->size[2], (long long)head_dim, (long long)heads_kv,
                         (long long)key->size[2]);
}

/* rotary_rules(input, sin_table, cos_table, inplace) -> (out, batch, seq, heads,
 * head_dim), or None: _rotary.py's rope_shapes for plain tensors read here (input
 * (batch, seq, heads, even head_dim), each table (seq, head_dim / 2)), and the result
 * (input itself in place, else torch.empty_like(input)); None where a tensor cannot be
 * read here or a rule fails: the caller checks in Python. */
PyObject *nt_py_rotary_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "rotary_rules takes 4 arguments, got %zd", nargs);
    int inplace = PyObject_IsTrue(args[3]);
    if (inplace < 0 || nt_torch_init())
        return NULL;
    nt_tensor t[3];
    for (int a = 0; a < 3; a++)
        if (nt_read_plain(args[a], &t[a]))
            Py_RETURN_NONE;
    const nt_tensor *input = &t[0];
    if (input->ndim != 4 || input->size[3] % 2)
        Py_RETURN_NONE;
    for (int a = 1; a < 3; a++)
        if (t[a].ndim != 2 || t[a].size[0] != input->size[1] || t[a].size[1] != input->size[3] / 2)
            Py_RETURN_NONE;
    PyObject *out = inplace ? Py_NewRef(args[0])
                            : PyObject_CallFunctionObjArgs(nt_torch.empty_like, args[0], NULL);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(NLLLL)", out, (long long)input->size[0], (long long)input->size[1],
                         (long long)input->size[2], (long long)input->size[3]);
}

/* torch's is_contiguous: row-major strides wherever a dim has more than one index. */
static int nt_contiguous(const nt_tensor *t) {
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->size[d] == 0)
            return 1;
        if (t->size[d] != 1 && t->stride[d] != expected)
            return 0;
        expected *= t->size[d];
    }
    return 1;
}

/* rms_norm_rules(input, normalized_shape, weight) -> welford (0 or 1), or None:
 * _rms_norm.py's rules for a call over the last dim (normalized_shape an int or one
 * int, equal to input's last dim; weight None or a plain tensor of that one dim) with
 * plain tensors read here, and the kernel's `welford` switch as _welford gives it;
 * None where a tensor cannot be read here, normalized_shape has other dims or a rule
 * fails: the caller checks in Python. */
PyObject *nt_py_rms_norm_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "rms_norm_rules takes 3 arguments, got %zd", nargs);
    if (nt_torch_init())
        return NULL;
    PyObject *shape = args[1];
    long long n = -1;
    if (PyLong_Check(shape))
        n = PyLong_AsLongLong(shape);
    else if (PyTuple_Check(shape) && PyTuple_Size(shape) == 1 &&
             PyLong_Check(PyTuple_GetItem(shape, 0))) /* torch.Size too */
        n = PyLong_AsLongLong(PyTuple_GetItem(shape, 0));
    else if (PyList_Check(shape) && PyList_Size(shape) == 1 &&
             PyLong_Check(PyList_GetItem(shape, 0)))
        n = PyLong_AsLongLong(PyList_GetItem(shape, 0));
    if (n == -1 && PyErr_Occurred())
        PyErr_Clear();
    nt_tensor t[2];
    int weighted = args[2] != Py_None;
    if (n < 0 || nt_read_plain(args[0], &t[0]) || (weighted && nt_read_plain(args[2], &t[1])))
        Py_RETURN_NONE;
    if (t[0].ndim < 1 || t[0].size[t[0].ndim - 1] != n ||
        (weighted && (t[1].ndim != 1 || t[1].size[0] != n)))
        Py_RETURN_NONE;
    int welford = n % 4 != 0 || n > (1LL << 24);
    uint64_t alignment = 4 * ((t[0].dtype_key >> 8 & 0xff) / 8); /* 4 elements of input's */
    for (int a = 0; a < 1 + weighted && !welford; a++)
        welford = alignment != 0 && nt_contiguous(&t[a]) && t[a].pointer % alignment != 0;
    return PyLong_FromLong(welford);
}
