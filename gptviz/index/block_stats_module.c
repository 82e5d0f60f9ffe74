/* gptviz.index._block_stats: the Python boundary of block_stats.c, built with the package (setup.py).
 *
 * update(...) takes every array as a buffer (numpy views of the scan's torch tensors: native.py) and checks, before the
 * pass runs, each one's dtype, dimensions and contiguity, that their sizes agree (the block's units first .. first + w
 * inside every per-unit array; rows, slots, locations and keys one per row), that every row and slot index and every
 * unit's zero bin lies inside the array it indexes, that the arrays written are writable and overlap no other, and
 * that the workspace holds the pass's scratch. Anything else raises ValueError; the pass then cannot read or write
 * outside the buffers it was given. The pass runs without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "block_stats.h"

enum kind { FLOAT32, FLOAT64, INT32, INT64, BYTES };
static const char *const KIND[] = {"float32", "float64", "int32", "int64", "bytes"};

typedef struct {
    const char *name;
    Py_buffer view;
    int held, written;
} Arg;

/* The buffer's items are `kind`, in this machine's byte order (numpy writes int64 as 'l' or 'q', int32 as 'i' or
 * 'l'). */
static int has_kind(const Py_buffer *v, enum kind kind)
{
    const char *f = v->format ? v->format : "B";
    const uint16_t probe = 1;
    const char native = *(const char *)&probe == 1 ? '<' : '>';
    if (*f == '@' || *f == '=' || *f == native)
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return 0;
    switch (kind) {
    case FLOAT32: return f[0] == 'f' && v->itemsize == 4;
    case FLOAT64: return f[0] == 'd' && v->itemsize == 8;
    case INT32: return (f[0] == 'i' || f[0] == 'l') && v->itemsize == 4;
    case INT64: return (f[0] == 'l' || f[0] == 'q') && v->itemsize == 8;
    case BYTES: return (f[0] == 'B' || f[0] == 'b' || f[0] == 'c') && v->itemsize == 1;
    }
    return 0;
}

/* Takes `obj`'s buffer into `a`: `kind` items in `ndim` dimensions, C-contiguous where `contiguous`, writable where
 * `written`. -1 with ValueError set otherwise. */
static int take(Arg *a, PyObject *obj, const char *name, enum kind kind, int ndim, int contiguous, int written)
{
    a->name = name;
    a->written = written;
    if (PyObject_GetBuffer(obj, &a->view, written ? PyBUF_RECORDS : PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "block_stats: %s must be a%s buffer of %s (a numpy array), not %.80s", name,
                     written ? " writable" : "", KIND[kind], Py_TYPE(obj)->tp_name);
        return -1;
    }
    a->held = 1;
    if (!has_kind(&a->view, kind)) {
        PyErr_Format(PyExc_ValueError, "block_stats: %s must hold %s, not items of format '%s' and %zd bytes", name,
                     KIND[kind], a->view.format ? a->view.format : "B", a->view.itemsize);
        return -1;
    }
    if (a->view.ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "block_stats: %s must have %d dimension%s, not %d", name, ndim,
                     ndim == 1 ? "" : "s", a->view.ndim);
        return -1;
    }
    if (contiguous && !PyBuffer_IsContiguous(&a->view, 'C')) {
        PyErr_Format(PyExc_ValueError, "block_stats: %s must be C-contiguous", name);
        return -1;
    }
    return 0;
}

/* -1 with ValueError unless dimension `dim` of `a` has `size` items. */
static int sized(const Arg *a, int dim, Py_ssize_t size, const char *what)
{
    if (a->view.shape[dim] == size)
        return 0;
    PyErr_Format(PyExc_ValueError, "block_stats: %s has %zd %s, not %zd", a->name, a->view.shape[dim], what, size);
    return -1;
}

/* The bytes a buffer spans, [*lo, *hi): empty when it has no items. */
static void span(const Py_buffer *v, uintptr_t *lo, uintptr_t *hi)
{
    Py_ssize_t first = 0, last = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 0) {
            *lo = *hi = (uintptr_t)v->buf;
            return;
        }
        Py_ssize_t far = (v->shape[d] - 1) * v->strides[d];
        first += far < 0 ? far : 0;
        last += far > 0 ? far : 0;
    }
    *lo = (uintptr_t)v->buf + first;
    *hi = (uintptr_t)v->buf + last + v->itemsize;
}

static int overlapping(const Arg *args, int count)
{
    for (int i = 0; i < count; i++)
        for (int j = i + 1; j < count; j++) {
            uintptr_t a0, a1, b0, b1;
            if (!args[i].written && !args[j].written)
                continue;
            span(&args[i].view, &a0, &a1);
            span(&args[j].view, &b0, &b1);
            if (a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1) {
                PyErr_Format(PyExc_ValueError, "block_stats: %s and %s share memory", args[i].name, args[j].name);
                return -1;
            }
        }
    return 0;
}

/* The scratch the pass needs for a block of w units: the top k's and the sample's thresholds, the counters [bins, w],
 * bin indices, tile maxima and the bins' bounds; each part starts on a 64-byte boundary. */
#define PART(bytes) ((((Py_ssize_t)(bytes)) + 63) / 64 * 64)
static Py_ssize_t workspace_size(Py_ssize_t w, Py_ssize_t bins)
{
    return PART(8 * w) + PART(8 * w) + PART(4 * bins * w) + 4 * PART(4 * w);
}

static PyObject *workspace_bytes(PyObject *self, PyObject *args)
{
    Py_ssize_t w, bins;
    if (!PyArg_ParseTuple(args, "nn", &w, &bins))
        return NULL;
    if (w < 0 || bins < 0 || (w > 0 && bins > INT32_MAX / w)) {
        PyErr_SetString(PyExc_ValueError, "block_stats: w and bins must be >= 0, w * bins under 2**31");
        return NULL;
    }
    return PyLong_FromSsize_t(workspace_size(w, bins));
}

enum { VALUES, ROWS, SLOTS, LOC, KEYS, TOKEN_SUMS, ZERO_BIN, INV_WIDTH, COUNTS, VMIN, VMAX, VSQ, BEST_V, BEST_LOC,
       SAMP_KEY, SAMP_V, SAMP_LOC, WORKSPACE, N_ARGS };

static PyObject *update(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"values", "rows", "slots", "loc", "keys", "first", "insert", "token_sums", "zero_bin",
                            "inv_width", "counts", "vmin", "vmax", "vsq", "best_v", "best_loc", "samp_key", "samp_v",
                            "samp_loc", "workspace", NULL};
    PyObject *o[N_ARGS];
    Py_ssize_t first;
    int insert;
    Arg a[N_ARGS];
    PyObject *result = NULL;
    memset(a, 0, sizeof a);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOnpOOOOOOOOOOOOO:update", names, &o[VALUES], &o[ROWS],
                                     &o[SLOTS], &o[LOC], &o[KEYS], &first, &insert, &o[TOKEN_SUMS], &o[ZERO_BIN],
                                     &o[INV_WIDTH], &o[COUNTS], &o[VMIN], &o[VMAX], &o[VSQ], &o[BEST_V], &o[BEST_LOC],
                                     &o[SAMP_KEY], &o[SAMP_V], &o[SAMP_LOC], &o[WORKSPACE]))
        return NULL;
    int has_rows = o[ROWS] != Py_None;
    /* values: rows of unit-stride float32 columns, rows at any step of whole items (a view into a wider tensor) */
    if (take(&a[VALUES], o[VALUES], "values", FLOAT32, 2, 0, 0) < 0
        || (has_rows && take(&a[ROWS], o[ROWS], "rows", INT64, 1, 1, 0) < 0)
        || take(&a[SLOTS], o[SLOTS], "slots", INT64, 1, 1, 0) < 0
        || take(&a[LOC], o[LOC], "loc", INT64, 1, 1, 0) < 0
        || take(&a[KEYS], o[KEYS], "keys", INT64, 1, 1, 0) < 0
        || take(&a[TOKEN_SUMS], o[TOKEN_SUMS], "token_sums", FLOAT32, 2, 1, 1) < 0
        || take(&a[ZERO_BIN], o[ZERO_BIN], "zero_bin", INT32, 1, 1, 0) < 0
        || take(&a[INV_WIDTH], o[INV_WIDTH], "inv_width", FLOAT32, 1, 1, 0) < 0
        || take(&a[COUNTS], o[COUNTS], "counts", INT64, 2, 1, 1) < 0
        || take(&a[VMIN], o[VMIN], "vmin", FLOAT32, 1, 1, 1) < 0
        || take(&a[VMAX], o[VMAX], "vmax", FLOAT32, 1, 1, 1) < 0
        || take(&a[VSQ], o[VSQ], "vsq", FLOAT64, 1, 1, 1) < 0
        || take(&a[BEST_V], o[BEST_V], "best_v", FLOAT32, 2, 1, 1) < 0
        || take(&a[BEST_LOC], o[BEST_LOC], "best_loc", INT64, 2, 1, 1) < 0
        || take(&a[SAMP_KEY], o[SAMP_KEY], "samp_key", INT64, 2, 1, 1) < 0
        || take(&a[SAMP_V], o[SAMP_V], "samp_v", FLOAT32, 2, 1, 1) < 0
        || take(&a[SAMP_LOC], o[SAMP_LOC], "samp_loc", INT64, 2, 1, 1) < 0
        || take(&a[WORKSPACE], o[WORKSPACE], "workspace", BYTES, 1, 1, 1) < 0)
        goto done;
    const Py_buffer *vv = &a[VALUES].view;
    Py_ssize_t N = vv->shape[0], w = vv->shape[1], n = has_rows ? a[ROWS].view.shape[0] : N;
    Py_ssize_t S = a[TOKEN_SUMS].view.shape[0], U = a[TOKEN_SUMS].view.shape[1], bins = a[COUNTS].view.shape[1];
    Py_ssize_t K = a[BEST_V].view.shape[1], R = a[SAMP_KEY].view.shape[1];
    Py_ssize_t step = N > 1 ? vv->strides[0] : 0;
    if ((w > 1 && vv->strides[1] != 4) || step < 0 || step % 4 != 0) {
        PyErr_SetString(PyExc_ValueError, "block_stats: values must be rows of unit-stride float32 columns");
        goto done;
    }
    if (first < 0 || first > U - w) {
        PyErr_Format(PyExc_ValueError, "block_stats: units %zd .. %zd are outside token_sums' %zd units", first,
                     first + w - 1, U);
        goto done;
    }
    /* the pass counts in int32 and indexes bins * w */
    if (n > INT32_MAX || bins < 2 || bins > INT32_MAX / (w > 0 ? w : 1)) {
        PyErr_Format(PyExc_ValueError, "block_stats: %zd rows, %zd bins of %zd units: under 2**31 rows and bins * "
                     "units, at least 2 bins", n, bins, w);
        goto done;
    }
    if (insert && K < 1) {
        PyErr_SetString(PyExc_ValueError, "block_stats: inserting into a top k of 0 entries");
        goto done;
    }
    if (sized(&a[SLOTS], 0, n, "rows") < 0 || sized(&a[LOC], 0, n, "rows") < 0 || sized(&a[KEYS], 0, n, "rows") < 0
        || sized(&a[ZERO_BIN], 0, U, "units") < 0 || sized(&a[INV_WIDTH], 0, U, "units") < 0
        || sized(&a[COUNTS], 0, U, "units") < 0 || sized(&a[VMIN], 0, U, "units") < 0
        || sized(&a[VSQ], 0, U, "units") < 0 || sized(&a[VMAX], 0, w, "units") < 0
        || sized(&a[BEST_V], 0, U, "units") < 0 || sized(&a[BEST_LOC], 0, U, "units") < 0
        || sized(&a[BEST_LOC], 1, K, "entries") < 0 || sized(&a[SAMP_KEY], 0, U, "units") < 0
        || sized(&a[SAMP_V], 0, U, "units") < 0 || sized(&a[SAMP_LOC], 0, U, "units") < 0
        || sized(&a[SAMP_V], 1, R, "entries") < 0 || sized(&a[SAMP_LOC], 1, R, "entries") < 0)
        goto done;
    if (a[WORKSPACE].view.len < workspace_size(w, bins) || (uintptr_t)a[WORKSPACE].view.buf % 64 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "block_stats: the workspace must hold %zd bytes from a 64-byte boundary, not %zd",
                     workspace_size(w, bins), a[WORKSPACE].view.len);
        goto done;
    }
    const int64_t *rows = has_rows ? (const int64_t *)a[ROWS].view.buf : NULL;
    const int64_t *slots = (const int64_t *)a[SLOTS].view.buf;
    const int32_t *zero_bin = (const int32_t *)a[ZERO_BIN].view.buf + first;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((rows && (rows[i] < 0 || rows[i] >= N)) || slots[i] < 0 || slots[i] >= S) {
            PyErr_Format(PyExc_ValueError, "block_stats: row %zd's index %lld or slot %lld is outside values' %zd rows "
                         "or token_sums' %zd slots", i, (long long)(rows ? rows[i] : i), (long long)slots[i], N, S);
            goto done;
        }
    for (Py_ssize_t u = 0; u < w; u++)
        if (zero_bin[u] < 1 || zero_bin[u] > bins - 1) {
            PyErr_Format(PyExc_ValueError, "block_stats: unit %zd's zero bin %d is outside 1 .. %zd", first + u,
                         (int)zero_bin[u], bins - 1);
            goto done;
        }
    if (overlapping(a, N_ARGS) < 0)
        goto done;

    char *ws = (char *)a[WORKSPACE].view.buf;
    float *thr = (float *)ws;
    int64_t *sthr = (int64_t *)(ws += PART(8 * w));
    int32_t *local = (int32_t *)(ws += PART(8 * w));
    int32_t *scratch = (int32_t *)(ws += PART(4 * bins * w));
    float *tile_max = (float *)(ws += PART(4 * w)), *lo = (float *)(ws += PART(4 * w));
    float *hi = (float *)(ws + PART(4 * w));
    float *best_v = (float *)a[BEST_V].view.buf + first * K, *vmax = (float *)a[VMAX].view.buf;
    int64_t *best_loc = (int64_t *)a[BEST_LOC].view.buf + first * K;
    int64_t top = 0;
    for (Py_ssize_t u = 0; u < w; u++) {
        lo[u] = (float)(1 - zero_bin[u]);
        hi[u] = (float)(bins - zero_bin[u]);
        vmax[u] = -INFINITY;
        thr[u] = K > 0 ? best_v[u * K + K - 1] : -INFINITY;  /* -inf while a slot is empty */
        if (insert)
            top = top == 2 || best_loc[u * K + K - 1] < 0 ? 2 : 1;  /* 2: some unit has an empty slot */
    }
    int64_t inserted;
    Py_BEGIN_ALLOW_THREADS
    inserted = gptviz_block_stats(
        (const float *)vv->buf, rows, n, w, step / 4, slots, (float *)a[TOKEN_SUMS].view.buf + first, U,
        (const float *)a[INV_WIDTH].view.buf + first, lo, hi, zero_bin, bins,
        (int64_t *)a[COUNTS].view.buf + first * bins, (float *)a[VMIN].view.buf + first, vmax,
        (double *)a[VSQ].view.buf + first, thr, best_v, best_loc, (const int64_t *)a[LOC].view.buf, K, top, local,
        scratch, tile_max, (const int64_t *)a[KEYS].view.buf, R, sthr, (int64_t *)a[SAMP_KEY].view.buf + first * R,
        (float *)a[SAMP_V].view.buf + first * R, (int64_t *)a[SAMP_LOC].view.buf + first * R);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(inserted);
done:
    for (int i = 0; i < N_ARGS; i++)
        if (a[i].held)
            PyBuffer_Release(&a[i].view);
    return result;
}

static PyMethodDef methods[] = {
    {"update", (PyCFunction)(void (*)(void))update, METH_VARARGS | METH_KEYWORDS,
     "update(values, rows, slots, loc, keys, first, insert, token_sums, zero_bin, inv_width, counts, vmin, vmax, vsq, "
     "best_v, best_loc, samp_key, samp_v, samp_loc, workspace) -> values inserted into the top k.\n\n"
     "Folds a block of unit values into a scan's running statistics in place (block_stats.c), after checking every "
     "array's dtype, shape and contiguity and every index against its array: ValueError otherwise."},
    {"workspace_bytes", workspace_bytes, METH_VARARGS,
     "workspace_bytes(w, bins) -> the bytes update's workspace needs for a block of w units."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_block_stats",
                                    "The neuron index's per-block statistics in one pass of C (block_stats.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__block_stats(void) { return PyModule_Create(&module); }
