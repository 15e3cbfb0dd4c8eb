/* The candidate set of a sampler chain that cuts to its top k, written straight into
 * a llama_token_data buffer: the ids of every logit >= the m-th largest of the row
 * (so the m largest, and all that tie the m-th), plus the ids the chain's first
 * samplers touch (biases, the penalties' window), ascending and each once.
 *
 * In numpy this took a block-maxima pass, a compare, a flatnonzero, the touched ids
 * marked in the mask, a gather of their logits and three field writes: each call
 * cheap, but right after llama_decode (caches full of weights) the dozen calls cost
 * ~0.2-0.3 ms a token. Here it is one vectorized pass over the row (block maxima), one
 * over the blocks that can hold the top and a selection on a few hundred values, in
 * one call. See mlxcel/engine/narrowing.py for why the set suffices.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

typedef struct {
    int32_t id;
    float logit;
    float p;
} token_data; /* llama_token_data (candidates.py checks TOKEN_DATA against it; fill checks the item size) */

/* The passes over a whole row, built twice on x86-64 with GCC: for AVX2 (8 keys a
 * compare, and a signed max the SSE2 baseline lacks) and for the baseline, the loader
 * picking one for the CPU at hand (numpy dispatches its own loops the same way). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)
#define ROW_PASS __attribute__((target_clones("avx2", "default")))
#else
#define ROW_PASS
#endif

#define BLOCKS_PER_M 8 /* more blocks: a tighter first bar, more maxima to select from */
#define MAX_BLOCK 256

/* Floats compared as int32 keys in the same order (-0.0 as +0.0), so that the passes
 * over the row vectorize without fast-math: a float's bits, the magnitude bits flipped
 * where it is negative. A NaN's key lies past an infinity's; rows with one are refused. */
static inline int32_t key_of(int32_t bits)
{
    return (bits ^ ((bits >> 31) & 0x7fffffff)) + (bits == INT32_MIN);
}

#define KEY_NEG_INF ((int32_t)0x807fffff) /* key_of(-inf) */

/* The k-th largest of a[0..n) (1 <= k <= n); reorders a. */
static int32_t kth_largest(int32_t *a, Py_ssize_t n, Py_ssize_t k)
{
    Py_ssize_t lo = 0, hi = n - 1, target = k - 1; /* a position in descending order */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int32_t x = a[lo], y = a[mid], z = a[hi];
        int32_t pivot = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i <= j) {
                int32_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (target <= j) hi = j;
        else if (target >= i) lo = i;
        else return a[target]; /* between the parts: equal to the pivot */
    }
    return a[target];
}

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Each block's largest key into maxima; whether the row holds a NaN. */
ROW_PASS static int block_maxima(const int32_t *bits, Py_ssize_t n, Py_ssize_t block, int32_t *maxima)
{
    uint32_t nan = 0;
    for (Py_ssize_t b = 0, start = 0; start < n; b++, start += block) {
        Py_ssize_t end = start + block < n ? start + block : n;
        int32_t top = INT32_MIN;
        for (Py_ssize_t i = start; i < end; i++) {
            int32_t v = bits[i];
            int32_t key = key_of(v);
            top = key > top ? key : top;
            nan |= (uint32_t)(v & 0x7fffffff) > 0x7f800000u;
        }
        maxima[b] = top;
    }
    return nan != 0;
}

/* The ids whose key is >= `bar` into out with their logits, ascending, visiting only
 * the blocks whose maximum reaches it (every block where maxima is NULL); how many, or
 * -1 where more than `cap`. `ids` has room for cap + MAX_BLOCK: each block's ids are
 * written without a branch, the count moved on by the compare. */
ROW_PASS static Py_ssize_t collect(const float *x, Py_ssize_t n, Py_ssize_t block, const int32_t *maxima,
                          int32_t bar, token_data *out, Py_ssize_t cap, int32_t *ids)
{
    const int32_t *bits = (const int32_t *)x;
    Py_ssize_t c = 0;
    for (Py_ssize_t b = 0, start = 0; start < n; b++, start += block) {
        if (maxima && maxima[b] < bar) continue;
        if (c > cap) return -1;
        Py_ssize_t end = start + block < n ? start + block : n;
        for (Py_ssize_t i = start; i < end; i++) {
            ids[c] = (int32_t)i;
            c += key_of(bits[i]) >= bar;
        }
    }
    if (c > cap) return -1;
    for (Py_ssize_t q = 0; q < c; q++) {
        out[q].id = ids[q];
        out[q].logit = x[ids[q]];
    }
    return c;
}

/* The set's size, or -1 where it cannot be had: a NaN in the row, fewer than m logits
 * above -inf (a mask left few), a set past `cap` entries, or m = k + touched past
 * `max_m`. */
static Py_ssize_t select_set(const float *x, Py_ssize_t n, Py_ssize_t k, Py_ssize_t max_m,
                             const int32_t *biased, Py_ssize_t nb_ids, const int32_t *window,
                             Py_ssize_t nw_ids, token_data *out, Py_ssize_t cap)
{
    const int32_t *bits = (const int32_t *)x;
    Py_ssize_t result = -1, nt = 0;
    int32_t *touched = NULL, *scratch = NULL, *row = NULL;

    /* the touched ids, ascending, once, in range */
    if (nb_ids + nw_ids) {
        touched = malloc((size_t)(nb_ids + nw_ids) * sizeof(int32_t));
        if (!touched) return -1;
        for (Py_ssize_t i = 0; i < nb_ids; i++)
            if (biased[i] >= 0 && biased[i] < n) touched[nt++] = biased[i];
        for (Py_ssize_t i = 0; i < nw_ids; i++)
            if (window[i] >= 0 && window[i] < n) touched[nt++] = window[i];
        qsort(touched, (size_t)nt, sizeof(int32_t), cmp_int32);
        Py_ssize_t u = 0;
        for (Py_ssize_t i = 0; i < nt; i++)
            if (u == 0 || touched[u - 1] != touched[i]) touched[u++] = touched[i];
        nt = u;
    }
    Py_ssize_t m = k + nt;
    if (k < 1 || m > max_m || m > n) goto done;

    Py_ssize_t block = n / (BLOCKS_PER_M * m);
    block = block < 1 ? 1 : (block > MAX_BLOCK ? MAX_BLOCK : block);
    Py_ssize_t n_blocks = (n + block - 1) / block;
    if (n_blocks <= m) goto done;
    scratch = malloc((size_t)(2 * n_blocks + 2 * cap + MAX_BLOCK) * sizeof(int32_t));
    if (!scratch) goto done;
    int32_t *maxima = scratch, *selecting = scratch + n_blocks, *ids = selecting + n_blocks + cap;

    /* pass 1: each block's maximum; m blocks reach the m-th largest of them, so at
     * least m logits are >= it */
    if (block_maxima(bits, n, block, maxima)) goto done; /* a NaN: the chain sees the row */
    memcpy(selecting, maxima, (size_t)n_blocks * sizeof(int32_t));
    int32_t first = kth_largest(selecting, n_blocks, m);
    if (first == KEY_NEG_INF) goto done;

    /* pass 2, over the blocks that reach it: a few hundred ids, the m largest among them */
    Py_ssize_t c = collect(x, n, block, maxima, first, out, cap, ids);
    int32_t threshold;
    if (c >= 0) {
        for (Py_ssize_t i = 0; i < c; i++) selecting[i] = key_of(bits[out[i].id]);
        threshold = kth_largest(selecting, c, m);
    } else {
        /* the largest logits crowd a few blocks (so their maxima set a low bar): the
         * m-th largest of the whole row, then the ids at or above it */
        row = malloc((size_t)n * sizeof(int32_t));
        if (!row) goto done;
        for (Py_ssize_t i = 0; i < n; i++) row[i] = key_of(bits[i]);
        threshold = kth_largest(row, n, m);
        if (threshold == KEY_NEG_INF || (c = collect(x, n, block, NULL, threshold, out, cap, ids)) < 0) goto done;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < c; i++)
        if (key_of(bits[out[i].id]) >= threshold) out[kept++] = out[i];

    /* the touched ids below the threshold (the rest are there), merged in from the end */
    Py_ssize_t extra = 0;
    for (Py_ssize_t i = 0; i < nt; i++)
        if (key_of(bits[touched[i]]) < threshold) touched[extra++] = touched[i];
    if (kept + extra > cap) goto done;
    Py_ssize_t i = kept - 1, j = extra - 1, w = kept + extra - 1;
    while (j >= 0) {
        if (i >= 0 && out[i].id > touched[j]) {
            out[w--] = out[i--];
        } else {
            out[w].id = touched[j];
            out[w].logit = x[touched[j]];
            w--;
            j--;
        }
    }
    result = kept + extra;
    for (Py_ssize_t q = 0; q < result; q++) out[q].p = 0.0f;

done:
    free(touched);
    free(scratch);
    free(row);
    return result;
}

static int get(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t item, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != item) {
        PyErr_Format(PyExc_ValueError, "%s: items of %zd bytes, not %zd", what, view->itemsize, item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(fill_doc,
"fill(logits, k, max_m, biased, window, out) -> int\n\n"
"Write the candidate set of a chain cutting to its top k into `out` (llama_token_data\n"
"entries): the ids of every logit >= the m-th largest, m = k + the touched ids (the\n"
"int32 `biased` and `window` ids, once each), and the touched ids, ascending, with\n"
"their logits and p 0. Returns how many, or -1 where the chain must see the whole\n"
"row: a NaN, fewer than m finite logits, m above max_m, or more entries than `out` holds.");

static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "fill takes 6 arguments");
        return NULL;
    }
    Py_ssize_t k = PyLong_AsSsize_t(args[1]), max_m = PyLong_AsSsize_t(args[2]);
    if ((k == -1 || max_m == -1) && PyErr_Occurred()) return NULL;
    Py_buffer lv, bv, wv, ov;
    if (get(args[0], &lv, 0, sizeof(float), "logits") < 0) return NULL;
    if (get(args[3], &bv, 0, sizeof(int32_t), "biased") < 0) goto fail_l;
    if (get(args[4], &wv, 0, sizeof(int32_t), "window") < 0) goto fail_b;
    if (get(args[5], &ov, 1, sizeof(token_data), "out") < 0) goto fail_w;
    /* the GIL is kept: releasing it for ~20 us would hand it to the event loop's
     * thread mid-step (see mlxcel/engine/held_wakeups.py) */
    Py_ssize_t result = select_set((const float *)lv.buf, lv.len / (Py_ssize_t)sizeof(float), k, max_m,
                        (const int32_t *)bv.buf, bv.len / (Py_ssize_t)sizeof(int32_t),
                        (const int32_t *)wv.buf, wv.len / (Py_ssize_t)sizeof(int32_t),
                        (token_data *)ov.buf, ov.len / (Py_ssize_t)sizeof(token_data));
    PyBuffer_Release(&ov);
    PyBuffer_Release(&wv);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&lv);
    return PyLong_FromSsize_t(result);
fail_w:
    PyBuffer_Release(&wv);
fail_b:
    PyBuffer_Release(&bv);
fail_l:
    PyBuffer_Release(&lv);
    return NULL;
}

/* The first index of the row's largest value, or of its first NaN (numpy's argmax):
 * one vectorized pass of block maxima that keeps the first block holding the largest,
 * then a scan of that block alone. */
ROW_PASS static Py_ssize_t first_argmax(const int32_t *bits, Py_ssize_t n)
{
    int32_t top = INT32_MIN;
    Py_ssize_t top_start = 0;
    uint32_t nan = 0;
    for (Py_ssize_t start = 0; start < n; start += MAX_BLOCK) {
        Py_ssize_t end = start + MAX_BLOCK < n ? start + MAX_BLOCK : n;
        int32_t block_top = INT32_MIN;
        for (Py_ssize_t i = start; i < end; i++) {
            int32_t v = bits[i];
            int32_t key = key_of(v);
            block_top = key > block_top ? key : block_top;
            nan |= (uint32_t)(v & 0x7fffffff) > 0x7f800000u;
        }
        if (block_top > top) { /* strictly: an equal later block does not hold the first */
            top = block_top;
            top_start = start;
        }
    }
    if (nan) {
        for (Py_ssize_t i = 0; i < n; i++)
            if ((uint32_t)(bits[i] & 0x7fffffff) > 0x7f800000u) return i;
    }
    for (Py_ssize_t i = top_start; i < n; i++)
        if (key_of(bits[i]) == top) return i;
    return top_start; /* not reached: the block holds its maximum */
}

typedef float *(*logits_ith_fn)(void *ctx, int32_t i);

PyDoc_STRVAR(argmax_row_doc,
"argmax_row(logits_ith, ctx, index, n_vocab, bans) -> int\n\n"
"The greedy pick of one batch output: the row llama_get_logits_ith(ctx, index) answers\n"
"(`logits_ith` that function's address, `ctx` the context's), its int32 `bans` ids set\n"
"to -inf in place (ids outside the row are skipped), then the lowest id of its largest\n"
"logit, or its first NaN (numpy's argmax). One call with the GIL held: no ctypes call\n"
"(which releases the GIL) and no array wrapped around the row. ValueError where\n"
"llama.cpp answers no row.");

static PyObject *argmax_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "argmax_row takes 5 arguments");
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(args[0]);
    if (fn == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "argmax_row: no function address");
        return NULL;
    }
    void *ctx = PyLong_AsVoidPtr(args[1]);
    if (ctx == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "argmax_row: no context");
        return NULL;
    }
    long index = PyLong_AsLong(args[2]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[3]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1 || index < INT32_MIN || index > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "argmax_row: n_vocab must be >= 1 and the index an int32");
        return NULL;
    }
    Py_buffer bv;
    if (get(args[4], &bv, 0, sizeof(int32_t), "bans") < 0) return NULL;
    float *row = ((logits_ith_fn)fn)(ctx, (int32_t)index);
    if (row == NULL) {
        PyBuffer_Release(&bv);
        PyErr_Format(PyExc_ValueError, "no logits for batch output %ld", index);
        return NULL;
    }
    const int32_t *bans = (const int32_t *)bv.buf;
    for (Py_ssize_t i = 0, m = bv.len / (Py_ssize_t)sizeof(int32_t); i < m; i++)
        if (bans[i] >= 0 && bans[i] < n) row[bans[i]] = -HUGE_VALF;
    PyBuffer_Release(&bv);
    return PyLong_FromSsize_t(first_argmax((const int32_t *)(const void *)row, n));
}

typedef struct {
    token_data *data;
    size_t size;
    int64_t selected;
    int8_t sorted; /* bool */
} token_data_array; /* llama_token_data_array (candidates.py's TOKEN_DATA_ARRAY checks the layout) */

typedef void (*sampler_apply_fn)(void *chain, token_data_array *array);
typedef void (*sampler_accept_fn)(void *chain, int32_t token);

PyDoc_STRVAR(chain_pick_doc,
"chain_pick(logits_ith, apply, accept, ctx, index, n_vocab, k, max_m, biased, window, out, array, chain) -> int\n\n"
"One sampled token of a chain that cuts to its top k, in one call with the GIL held:\n"
"the row llama_get_logits_ith(ctx, index) answers, its candidate set written into\n"
"`out` as fill() writes it, the chain applied to it through the llama_token_data_array\n"
"at address `array` (`apply`: llama_sampler_apply's address, `chain` the sampler's),\n"
"and the selected token accepted by the chain (`accept`: llama_sampler_accept's).\n"
"Returns the token, or -1 where the set cannot be had (fill's -1: the caller runs the\n"
"chain on the whole row; nothing was applied or accepted). ValueError where llama.cpp\n"
"answers no row; RuntimeError where the chain selects nothing.");

static void *address(PyObject *obj, const char *what)
{
    void *p = PyLong_AsVoidPtr(obj);
    if (p == NULL && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "chain_pick: no %s", what);
    return p;
}

static PyObject *chain_pick(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "chain_pick takes 13 arguments");
        return NULL;
    }
    void *logits_ith = address(args[0], "logits function"), *apply = NULL, *accept = NULL, *ctx = NULL;
    if (logits_ith == NULL || (apply = address(args[1], "apply function")) == NULL
        || (accept = address(args[2], "accept function")) == NULL || (ctx = address(args[3], "context")) == NULL)
        return NULL;
    long index = PyLong_AsLong(args[4]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[5]), k = PyLong_AsSsize_t(args[6]), max_m = PyLong_AsSsize_t(args[7]);
    if ((n == -1 || k == -1 || max_m == -1) && PyErr_Occurred()) return NULL;
    if (n < 1 || index < INT32_MIN || index > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "chain_pick: n_vocab must be >= 1 and the index an int32");
        return NULL;
    }
    token_data_array *array = (token_data_array *)address(args[11], "array");
    void *chain = array == NULL ? NULL : address(args[12], "chain");
    if (chain == NULL) return NULL;
    PyObject *result = NULL;
    Py_buffer bv, wv, ov;
    if (get(args[8], &bv, 0, sizeof(int32_t), "biased") < 0) return NULL;
    if (get(args[9], &wv, 0, sizeof(int32_t), "window") < 0) goto fail_b;
    if (get(args[10], &ov, 1, sizeof(token_data), "out") < 0) goto fail_w;
    const float *row = ((logits_ith_fn)logits_ith)(ctx, (int32_t)index);
    if (row == NULL) {
        PyErr_Format(PyExc_ValueError, "no logits for batch output %ld", index);
        goto done;
    }
    token_data *out = (token_data *)ov.buf;
    Py_ssize_t m = select_set(row, n, k, max_m, (const int32_t *)bv.buf, bv.len / (Py_ssize_t)sizeof(int32_t),
                              (const int32_t *)wv.buf, wv.len / (Py_ssize_t)sizeof(int32_t),
                              out, ov.len / (Py_ssize_t)sizeof(token_data));
    if (m < 0) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    array->data = out;
    array->size = (size_t)m;
    array->selected = -1;
    array->sorted = 0;
    ((sampler_apply_fn)apply)(chain, array);
    if (array->selected < 0 || (size_t)array->selected >= array->size) {
        PyErr_SetString(PyExc_RuntimeError, "the sampler chain selected no token");
        goto done;
    }
    int32_t token = array->data[array->selected].id; /* XTC may have moved data forward */
    ((sampler_accept_fn)accept)(chain, token);
    result = PyLong_FromLong(token);
done:
    PyBuffer_Release(&ov);
fail_w:
    PyBuffer_Release(&wv);
fail_b:
    PyBuffer_Release(&bv);
    return result;
}

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, fill_doc},
    {"argmax_row", (PyCFunction)(void (*)(void))argmax_row, METH_FASTCALL, argmax_row_doc},
    {"chain_pick", (PyCFunction)(void (*)(void))chain_pick, METH_FASTCALL, chain_pick_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_topset",
    "A sampler chain's candidate set, the chain's pick on it, and a greedy pick, in C (see mlxcel/engine/narrowing.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__topset(void) { return PyModule_Create(&module); }
