/* gputape._native: an optional C accelerator for the recording hot path and the backward key.
 *
 * Each piece the exact twin of a Python reference that stays the fallback:
 *
 * - Recorder: the ``record(obs, x, res)`` / ``record(obs, x, y, res)`` objects the generated
 *   entry points call (gputape.recording.recorder1/recorder2). The common case (no hooks, no
 *   locations, a float16/32/64 result, exact Tensor operands of the result's dtype, every tape
 *   tracking an operand) is done here, with the watch on read of a Variable a GradientTape does
 *   not track yet (GradientTape._watch_variable's steps); anything else calls the Python recorder
 *   with the same arguments before anything observable happened here (a watch done is idempotent).
 * - Structure: gputape._backward_compile._structure (the key, the slot dict, the relevance set).
 * - Entry: the generated one- and two-operand entry points of gputape.dispatch (``_UNARY`` and
 *   ``_BINARY``): host tensors and Python numbers outside every hook and profiler are computed
 *   here; anything else calls the generated Python function with the same arguments first.
 * - Swapped: the reflected operators (``2 * x``) over a two-operand Entry, likewise.
 * - Results: gputape.tape._results (gradient()'s raw gradients as Tensors), its common case.
 * - scope(): GradientTape's __enter__/__exit__ (gputape._state.Scope's push and pop) for a tape of
 *   exactly that class, with no Python code between the with statement's call and the commit.
 * - plain_pairs / plain_sgd_step: gputape._optim_base's _plain_pairs and Optimizer._step_plain (an
 *   eager plain-SGD step: the check loop, then phase 1 and a phase 2 that runs no bytecode).
 *
 * Objects are reached through their slot offsets (read once from the classes' member
 * descriptors), the way the interpreter itself reads a __slots__ attribute.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define API_VERSION 4
#define MAX_TAPES 16 /* more nested tapes than this: the Python recorder */

/* ---- what setup() hands over ------------------------------------------------------------ */

static PyTypeObject *Tensor_T, *Node_T, *Observers_T, *Primitive_T, *ndarray_T, *Literal_T, *Variable_T;
static PyTypeObject *Tape_T; /* gputape.tape.GradientTape (watching()): the tapes whose watch on read is done here */
static Py_ssize_t off_v_trainable;
static PyObject *NOPARAMS, *NOSAVED;
static PyObject *FLOATS[3];
static Py_ssize_t off_t_data, off_t_id;
static Py_ssize_t off_n_casts, off_n_ids, off_n_info, off_n_meta, off_n_out, off_n_params, off_n_prim, off_n_saved,
    off_n_shapes;
static Py_ssize_t off_o_hooks, off_o_tapes, off_o_locations, off_p_vjp;
static int ready = 0;

static PyObject *s_auto, *s_watched_vars;
static PyObject *s_dtype, *s_shape, *s_tensors, *s_nodes, *s_leaves, *s_persistent, *s_vjp, *s_MAX_NODES, *s_Node,
    *s_seeds, *s_sources, *s_already_swept, *s_too_many_nodes, *s_no_source_recorded;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* The head of numpy's PyArrayObject (numpy/ndarraytypes.h, PyArrayObject_fields: public and
 * unchanged since numpy 1.7): an exact ndarray's dtype (``a.dtype`` returns descr itself) and its
 * shape, read without building the shape tuple. Used only where setup() has checked it on an
 * array it made (direct_arrays). */
typedef struct {
    PyObject_HEAD char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags; /* NPY_ARRAY_C_CONTIGUOUS is bit 0 (checked by probe_arrays on an array and its transpose) */
} ArrayHead;
#define C_CONTIGUOUS 0x0001
static int direct_arrays = 0;
#define IS_DIRECT(a) (direct_arrays && Py_IS_TYPE(a, ndarray_T))

static Py_ssize_t slot_offset(PyTypeObject *tp, const char *name) {
    PyObject *d = PyObject_GetAttrString((PyObject *)tp, name);
    if (d == NULL)
        return -1;
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "gputape._native.setup: %s.%s is not a __slots__ entry", tp->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    Py_ssize_t off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return off;
}

/* Store a new reference in a fresh object's slot (which holds NULL). */
static inline void put(PyObject *o, Py_ssize_t off, PyObject *v) { SLOT(o, off) = v; }

/* Whether ArrayHead is this numpy's layout: an array of shape (3, 5, 7) read both ways (-1: an error). */
static int probe_arrays(void) {
    direct_arrays = 0;
    PyObject *a = PyObject_CallFunction((PyObject *)ndarray_T, "((iii))", 3, 5, 7);
    if (a == NULL)
        return -1;
    PyObject *dt = PyObject_GetAttr(a, s_dtype), *shape = PyObject_GetAttr(a, s_shape);
    const ArrayHead *h = (const ArrayHead *)a;
    int ok = dt != NULL && shape != NULL && Py_IS_TYPE(a, ndarray_T) && h->descr == dt && h->nd == 3 &&
             PyTuple_CheckExact(shape) && PyTuple_GET_SIZE(shape) == 3;
    for (int k = 0; ok && k < 3; k++)
        ok = h->dimensions[k] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k)) && h->dimensions[k] == 3 + 2 * k;
    PyObject *t = ok ? PyObject_GetAttrString(a, "T") : NULL; /* (a view: not C-contiguous) */
    ok = ok && t != NULL && Py_IS_TYPE(t, ndarray_T) && (h->flags & C_CONTIGUOUS) &&
         !(((const ArrayHead *)t)->flags & C_CONTIGUOUS);
    Py_XDECREF(t);
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_DECREF(a);
    if (PyErr_Occurred())
        return -1;
    direct_arrays = ok;
    return 0;
}

static PyObject *setup(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *tensor, *node, *observers, *primitive, *noparams, *nosaved, *floats, *ndarray, *literal, *variable;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!O!O!:setup", &PyType_Type, &tensor, &PyType_Type, &node,
                          &PyType_Type, &observers, &PyType_Type, &primitive, &PyDict_Type, &noparams, &PyList_Type,
                          &nosaved, &PyTuple_Type, &floats, &PyType_Type, &ndarray, &PyType_Type, &literal,
                          &PyType_Type, &variable))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)variable, (PyTypeObject *)tensor)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.setup: Variable must subclass Tensor");
        return NULL;
    }
    if (PyTuple_GET_SIZE(floats) != 3) {
        PyErr_SetString(PyExc_ValueError, "gputape._native.setup: floats must hold the three float dtypes");
        return NULL;
    }
    Py_ssize_t o[15];
    PyTypeObject *t = (PyTypeObject *)tensor, *n = (PyTypeObject *)node, *b = (PyTypeObject *)observers;
    const char *nn[9] = {"casts", "ids", "info", "meta", "out", "params", "prim", "saved", "shapes"};
    if ((o[0] = slot_offset(t, "_data")) < 0 || (o[1] = slot_offset(t, "_id")) < 0)
        return NULL;
    for (int k = 0; k < 9; k++)
        if ((o[2 + k] = slot_offset(n, nn[k])) < 0)
            return NULL;
    if ((o[11] = slot_offset(b, "hooks")) < 0 || (o[12] = slot_offset(b, "tapes")) < 0 ||
        (o[13] = slot_offset(b, "locations")) < 0 || (o[14] = slot_offset((PyTypeObject *)primitive, "vjp")) < 0)
        return NULL;
    off_t_data = o[0], off_t_id = o[1];
    off_n_casts = o[2], off_n_ids = o[3], off_n_info = o[4], off_n_meta = o[5], off_n_out = o[6];
    off_n_params = o[7], off_n_prim = o[8], off_n_saved = o[9], off_n_shapes = o[10];
    off_o_hooks = o[11], off_o_tapes = o[12], off_o_locations = o[13], off_p_vjp = o[14];
    Py_ssize_t tr = slot_offset((PyTypeObject *)variable, "_trainable");
    if (tr < 0)
        return NULL;
    off_v_trainable = tr;
    Py_XSETREF(Tensor_T, (PyTypeObject *)Py_NewRef(tensor));
    Py_XSETREF(Node_T, (PyTypeObject *)Py_NewRef(node));
    Py_XSETREF(Observers_T, (PyTypeObject *)Py_NewRef(observers));
    Py_XSETREF(Primitive_T, (PyTypeObject *)Py_NewRef(primitive));
    Py_XSETREF(ndarray_T, (PyTypeObject *)Py_NewRef(ndarray));
    Py_XSETREF(Literal_T, (PyTypeObject *)Py_NewRef(literal));
    Py_XSETREF(Variable_T, (PyTypeObject *)Py_NewRef(variable));
    Py_XSETREF(NOPARAMS, Py_NewRef(noparams));
    Py_XSETREF(NOSAVED, Py_NewRef(nosaved));
    for (int k = 0; k < 3; k++)
        Py_XSETREF(FLOATS[k], Py_NewRef(PyTuple_GET_ITEM(floats, k)));
    if (probe_arrays() < 0)
        return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

/* ---- Recorder ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *prim;
    PyObject *fallback; /* the Python recorder: every case but the common one */
    int nargs;          /* operands: 1 or 2 */
    int nsave;          /* operand positions saved, in order, then the output when save_out */
    int save[2];
    int save_out;
    PyObject *literals; /* typed residuals (multiply): a number operand saved as its typed 0-d array */
    PyObject *literal_miss;
    PyObject *typed_dtypes[2]; /* the result dtypes it is done for (float32, float64) */
    /* The last node's shapes and meta tuples, by which operands are tensors (x, y, both), reused
     * while every tensor operand and the output have that one shape and dtype (a chain's case):
     * equal tuples, not built again (fewer objects for the cyclic collector to count and walk). */
    struct {
        PyObject *shape, *dt, *shapes, *meta;
    } cache[3];
    Py_ssize_t fast, slow;
} Recorder;

/* a's dtype (a new reference). */
static inline PyObject *dtype_of(PyObject *a) {
    return IS_DIRECT(a) ? Py_NewRef(((ArrayHead *)a)->descr) : PyObject_GetAttr(a, s_dtype);
}

/* Whether a (IS_DIRECT) has shape ``shape`` (a tuple numpy built). */
static int has_shape(PyObject *a, PyObject *shape) {
    const ArrayHead *h = (const ArrayHead *)a;
    if (h->nd != PyTuple_GET_SIZE(shape))
        return 0;
    for (int k = 0; k < h->nd; k++)
        if (PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k)) != h->dimensions[k])
            return 0;
    return 1;
}

static int is_float(PyObject *dt) { return dt == FLOATS[0] || dt == FLOATS[1] || dt == FLOATS[2]; }

static int truth(PyObject *v) {
    if (v == Py_False)
        return 0;
    if (v == Py_True)
        return 1;
    return -1; /* not a bool: let the Python recorder judge it */
}

/* A number's dtype table (gputape.expr._Literal, whose get is dict's, or a plain dict). */
static inline int is_table(PyObject *t) { return PyDict_CheckExact(t) || Py_IS_TYPE(t, Literal_T); }

/* dispatch.typed_number(v, d) for a Python float or int v and a host array d (a new reference). */
static PyObject *typed_number(PyObject *literals, PyObject *literal_miss, PyObject *v, PyObject *d) {
    if (!PyFloat_CheckExact(v) && !PyLong_CheckExact(v))
        return Py_NewRef(v);
    PyObject *t = PyDict_GetItemWithError(literals, v);
    if (t != NULL) {
        Py_INCREF(t);
    } else {
        if (PyErr_Occurred())
            return NULL;
        t = PyObject_CallOneArg(literal_miss, v);
        if (t == NULL)
            return NULL;
    }
    PyObject *got = NULL, *dt = dtype_of(d);
    if (dt != NULL) {
        if (is_table(t)) {
            got = PyDict_GetItemWithError(t, dt);
            if (got != NULL)
                Py_INCREF(got);
            else if (!PyErr_Occurred())
                got = Py_NewRef(v);
        } else {
            got = PyObject_CallMethod(t, "get", "OO", dt, v);
        }
        Py_DECREF(dt);
    }
    Py_DECREF(t);
    return got;
}

/* recording._watch_on_read(tape, var) for a Variable whose id ``tt`` (the tape's _tensors) lacks and
 * whose array has a float dtype (so one of DIFF_DTYPES): 1 watched, 0 not (watch_accessed_variables
 * off, or not trainable), 2 the Python path must judge (nothing done: another tape class, a field
 * that is not what GradientTape makes), -1 an error. GradientTape._watch_variable, step for step. */
static int watch_on_read(PyObject *tape, PyObject *tt, PyObject *var, PyObject *vid) {
    if (Tape_T == NULL || Py_TYPE(tape) != Tape_T)
        return 2;
    PyObject *autov = PyObject_GetAttr(tape, s_auto);
    if (autov == NULL)
        return -1;
    int on = truth(autov);
    Py_DECREF(autov);
    if (on <= 0)
        return on < 0 ? 2 : 0;
    PyObject *trainable = SLOT(var, off_v_trainable);
    if (trainable == NULL)
        return 2;
    on = truth(trainable);
    if (on <= 0)
        return on < 0 ? 2 : 0;
    PyObject *leaves = PyObject_GetAttr(tape, s_leaves);
    if (leaves == NULL)
        return -1;
    PyObject *wv = PyObject_GetAttr(tape, s_watched_vars);
    if (wv == NULL) {
        Py_DECREF(leaves);
        return -1;
    }
    int ret = 2;
    if (PySet_CheckExact(leaves) && PyDict_CheckExact(wv)) {
        PyObject *got = NULL;
        ret = (PySet_Add(tt, vid) < 0 || PySet_Add(leaves, vid) < 0 || (got = PyDict_SetDefault(wv, vid, var)) == NULL)
                  ? -1
                  : 1;
    }
    Py_DECREF(leaves);
    Py_DECREF(wv);
    return ret;
}

/* The common case, or 1 to take the Python path (nothing observable done yet: a watch on read done
 * here is idempotent, the Python recorder then finds the Variable tracked), or -1 on error. */
static int record_fast(Recorder *r, PyObject *const *a) {
    PyObject *obs = a[0], *res = a[r->nargs + 1];
    if (Py_TYPE(obs) != Observers_T || Py_TYPE(res) != Tensor_T)
        return 1;
    PyObject *hooks = SLOT(obs, off_o_hooks), *tapes = SLOT(obs, off_o_tapes), *loc = SLOT(obs, off_o_locations);
    if (hooks == NULL || tapes == NULL || loc == NULL || truth(hooks) != 0 || truth(loc) != 0 ||
        !PyTuple_CheckExact(tapes))
        return 1;
    Py_ssize_t nt = PyTuple_GET_SIZE(tapes);
    if (nt == 0)
        return 0;
    if (nt > MAX_TAPES)
        return 1;
    PyObject *d = SLOT(res, off_t_data), *rid = SLOT(res, off_t_id);
    if (d == NULL || rid == NULL)
        return 1;
    /* the operands: exact Tensors and Variables (one some tape does not track yet is watched on
     * read: the Python path), or raw values */
    PyObject *ops[2] = {NULL, NULL}, *datas[2] = {NULL, NULL}, *oids[2] = {NULL, NULL};
    int ntensors = 0, var[2] = {0, 0};
    for (int k = 0; k < r->nargs; k++) {
        PyObject *x = a[1 + k];
        if (Py_TYPE(x) == Tensor_T || Py_TYPE(x) == Variable_T) {
            var[k] = Py_TYPE(x) == Variable_T;
            ops[k] = x;
            datas[k] = SLOT(x, off_t_data);
            oids[k] = SLOT(x, off_t_id);
            if (datas[k] == NULL || oids[k] == NULL)
                return 1;
            ntensors++;
        } else if (PyObject_TypeCheck(x, Tensor_T)) {
            return 1;
        } else if (r->nargs == 1) {
            return 1;
        } else {
            datas[k] = x;
        }
    }
    if (ntensors == 0)
        return 1;
    /* held from here on: what follows may run other code (a collection's finalizers) */
    Py_INCREF(tapes);
    Py_INCREF(d);
    Py_INCREF(rid);
    for (int k = 0; k < r->nargs; k++) {
        Py_INCREF(datas[k]);
        Py_XINCREF(oids[k]);
    }
    int ret = 1;
    PyObject *dt = NULL, *shapes[2] = {NULL, NULL}, *tts[MAX_TAPES], *lists[MAX_TAPES];
    PyObject *shp = NULL, *meta = NULL, *oshape = NULL;
    int ngot = 0;
    dt = dtype_of(d);
    if (dt == NULL)
        goto error;
    if (!is_float(dt))
        goto done;
    for (int k = 0; k < r->nargs; k++) {
        if (ops[k] == NULL)
            continue;
        PyObject *xdt = dtype_of(datas[k]);
        if (xdt == NULL)
            goto error;
        Py_DECREF(xdt); /* (compared by identity only, as the Python recorder does) */
        if (xdt != dt)
            goto done; /* a cast: the Python recorder's complex_node */
    }
    /* every tape tracks an operand (else the Python path notes the edge for explain) */
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *tape = PyTuple_GET_ITEM(tapes, t);
        PyObject *tt = PyObject_GetAttr(tape, s_tensors);
        if (tt == NULL)
            goto error;
        PyObject *nodes = PyObject_GetAttr(tape, s_nodes);
        if (nodes == NULL) {
            Py_DECREF(tt);
            goto error;
        }
        tts[ngot] = tt;
        lists[ngot] = nodes;
        ngot++;
        if (!PySet_CheckExact(tt) || !PyList_CheckExact(nodes))
            goto done;
        int hit = 0;
        for (int k = 0; k < r->nargs; k++) {
            if (oids[k] == NULL || (hit && !var[k]))
                continue;
            int in = PySet_Contains(tt, oids[k]);
            if (in < 0)
                goto error;
            if (!in && var[k]) { /* the first read of a trainable Variable under this tape watches it */
                in = watch_on_read(tape, tt, ops[k], oids[k]);
                if (in < 0)
                    goto error;
                if (in == 2)
                    goto done;
            }
            hit = hit || in;
        }
        if (!hit)
            goto done;
    }
    /* the node, as recorder1/recorder2 build it */
    int pat = (ops[0] != NULL) | (r->nargs == 2 && ops[1] != NULL) << 1;
    if (r->cache[pat - 1].meta != NULL && r->cache[pat - 1].dt == dt && IS_DIRECT(d) &&
        has_shape(d, r->cache[pat - 1].shape)) {
        int hit = 1;
        for (int k = 0; k < r->nargs && hit; k++)
            hit = ops[k] == NULL || (IS_DIRECT(datas[k]) && has_shape(datas[k], r->cache[pat - 1].shape));
        if (hit) {
            shp = Py_NewRef(r->cache[pat - 1].shapes);
            meta = Py_NewRef(r->cache[pat - 1].meta);
        }
    }
    if (shp == NULL) {
        int same = IS_DIRECT(d); /* (whether to keep these tuples for the next node) */
        for (int k = 0; k < r->nargs; k++) {
            if (ops[k] == NULL)
                continue;
            same = same && IS_DIRECT(datas[k]);
            shapes[k] = PyObject_GetAttr(datas[k], s_shape);
            if (shapes[k] == NULL)
                goto error;
        }
        if ((shp = PyTuple_New(r->nargs)) == NULL)
            goto error;
        for (int k = 0; k < r->nargs; k++)
            PyTuple_SET_ITEM(shp, k, Py_NewRef(ops[k] ? shapes[k] : Py_None));
        /* one operand: the output has its shape (the same tuple); two: the output's own */
        oshape = r->nargs == 1 ? Py_NewRef(shapes[0]) : PyObject_GetAttr(d, s_shape);
        if (oshape == NULL || (meta = PyTuple_Pack(2, oshape, dt)) == NULL) {
            Py_DECREF(shp);
            goto error;
        }
        same = same && PyTuple_CheckExact(oshape);
        for (int k = 0; k < r->nargs && same > 0; k++)
            if (ops[k] != NULL)
                same = PyObject_RichCompareBool(shapes[k], oshape, Py_EQ);
        if (same < 0) {
            Py_DECREF(shp);
            Py_DECREF(meta);
            goto error;
        }
        if (same) {
            Py_XSETREF(r->cache[pat - 1].shape, Py_NewRef(oshape));
            Py_XSETREF(r->cache[pat - 1].dt, Py_NewRef(dt));
            Py_XSETREF(r->cache[pat - 1].shapes, Py_NewRef(shp));
            Py_XSETREF(r->cache[pat - 1].meta, Py_NewRef(meta));
        }
    }
    PyObject *node = Node_T->tp_alloc(Node_T, 0);
    if (node == NULL) {
        Py_DECREF(shp);
        Py_DECREF(meta);
        goto error;
    }
    put(node, off_n_prim, Py_NewRef(r->prim));
    put(node, off_n_params, Py_NewRef(NOPARAMS));
    put(node, off_n_casts, Py_NewRef(Py_None));
    put(node, off_n_info, Py_NewRef(Py_None));
    put(node, off_n_out, Py_NewRef(rid));
    put(node, off_n_shapes, shp);
    put(node, off_n_meta, meta);
    PyObject *ids = PyTuple_New(r->nargs), *saved = NULL;
    if (ids == NULL)
        goto node_error;
    put(node, off_n_ids, ids);
    for (int k = 0; k < r->nargs; k++)
        PyTuple_SET_ITEM(ids, k, ops[k] ? Py_NewRef(oids[k]) : PyLong_FromLong(0));
    int ns = r->nsave + r->save_out;
    if (ns == 0) {
        saved = Py_NewRef(NOSAVED);
    } else {
        saved = PyList_New(ns);
        if (saved == NULL)
            goto node_error;
        for (int k = 0; k < r->nsave; k++) {
            int p = r->save[k];
            PyObject *v = datas[p];
            if (ops[p] == NULL && r->literals != NULL && r->nargs == 2 &&
                (dt == r->typed_dtypes[0] || dt == r->typed_dtypes[1]) && Py_IS_TYPE(datas[1 - p], ndarray_T)) {
                /* the same typed number the entry point handed the ufunc (dispatch.typed_number) */
                v = typed_number(r->literals, r->literal_miss, v, datas[1 - p]);
                if (v == NULL) {
                    Py_DECREF(saved);
                    goto node_error;
                }
            } else {
                Py_INCREF(v);
            }
            PyList_SET_ITEM(saved, k, v);
        }
        if (r->save_out)
            PyList_SET_ITEM(saved, r->nsave, Py_NewRef(d));
    }
    put(node, off_n_saved, saved);
    for (int t = 0; t < ngot; t++) {
        if (PyList_Append(lists[t], node) < 0 || PySet_Add(tts[t], rid) < 0) {
            Py_DECREF(node);
            goto error;
        }
    }
    Py_DECREF(node);
    ret = 0;
    goto done;
node_error:
    Py_DECREF(node);
error:
    ret = -1;
done:
    Py_XDECREF(dt);
    Py_XDECREF(oshape);
    Py_XDECREF(shapes[0]);
    Py_XDECREF(shapes[1]);
    for (int k = 0; k < r->nargs; k++) {
        Py_DECREF(datas[k]);
        Py_XDECREF(oids[k]);
    }
    Py_DECREF(rid);
    Py_DECREF(d);
    Py_DECREF(tapes);
    for (int t = 0; t < ngot; t++) {
        Py_DECREF(tts[t]);
        Py_DECREF(lists[t]);
    }
    return ret;
}

static PyObject *Recorder_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Recorder *r = (Recorder *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && n == r->nargs + 2 && ready) {
        int got = record_fast(r, args);
        if (got == 0) {
            r->fast++;
            Py_RETURN_NONE;
        }
        if (got < 0)
            return NULL;
    }
    r->slow++;
    return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
}

static PyObject *Recorder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"prim",     "nargs",        "save",         "save_out", "fallback",
                         "literals", "literal_miss", "typed_dtypes", NULL};
    PyObject *prim, *save, *fallback, *literals = NULL, *literal_miss = NULL, *typed_dtypes = NULL;
    int nargs, save_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiO!pO|O!OO!:Recorder", kw, &prim, &nargs, &PyTuple_Type, &save,
                                     &save_out, &fallback, &PyDict_Type, &literals, &literal_miss, &PyTuple_Type,
                                     &typed_dtypes))
        return NULL;
    if ((literals == NULL) != (literal_miss == NULL) || (literals == NULL) != (typed_dtypes == NULL) ||
        (literal_miss != NULL && !PyCallable_Check(literal_miss)) ||
        (typed_dtypes != NULL && PyTuple_GET_SIZE(typed_dtypes) != 2)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.Recorder: literals (a dict), literal_miss (a callable) and "
                                         "typed_dtypes (two dtypes) come together");
        return NULL;
    }
    if (nargs != 1 && nargs != 2) {
        PyErr_Format(PyExc_ValueError, "gputape._native.Recorder: nargs must be 1 or 2, got %d", nargs);
        return NULL;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(save);
    if (ns > nargs) {
        PyErr_Format(PyExc_ValueError, "gputape._native.Recorder: %zd saved positions for %d operands", ns, nargs);
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.Recorder: fallback must be callable");
        return NULL;
    }
    int pos[2];
    for (Py_ssize_t k = 0; k < ns; k++) {
        long p = PyLong_AsLong(PyTuple_GET_ITEM(save, k));
        if (p == -1 && PyErr_Occurred())
            return NULL;
        if (p < 0 || p >= nargs) {
            PyErr_Format(PyExc_ValueError, "gputape._native.Recorder: saved position %ld of %d operands", p, nargs);
            return NULL;
        }
        pos[k] = (int)p;
    }
    Recorder *r = (Recorder *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->vectorcall = Recorder_vectorcall;
    r->prim = Py_NewRef(prim);
    r->fallback = Py_NewRef(fallback);
    r->nargs = nargs;
    r->nsave = (int)ns;
    for (Py_ssize_t k = 0; k < ns; k++)
        r->save[k] = pos[k];
    r->save_out = save_out;
    r->literals = Py_XNewRef(literals);
    r->literal_miss = Py_XNewRef(literal_miss);
    for (int k = 0; k < 2; k++)
        r->typed_dtypes[k] = typed_dtypes ? Py_NewRef(PyTuple_GET_ITEM(typed_dtypes, k)) : NULL;
    return (PyObject *)r;
}

static int Recorder_traverse(Recorder *r, visitproc visit, void *arg) {
    Py_VISIT(r->prim);
    Py_VISIT(r->fallback);
    Py_VISIT(r->literals);
    Py_VISIT(r->literal_miss);
    Py_VISIT(r->typed_dtypes[0]);
    Py_VISIT(r->typed_dtypes[1]);
    for (int k = 0; k < 3; k++) {
        Py_VISIT(r->cache[k].shape);
        Py_VISIT(r->cache[k].dt);
        Py_VISIT(r->cache[k].shapes);
        Py_VISIT(r->cache[k].meta);
    }
    return 0;
}

static int Recorder_clear(Recorder *r) {
    Py_CLEAR(r->prim);
    Py_CLEAR(r->fallback);
    Py_CLEAR(r->literals);
    Py_CLEAR(r->literal_miss);
    Py_CLEAR(r->typed_dtypes[0]);
    Py_CLEAR(r->typed_dtypes[1]);
    for (int k = 0; k < 3; k++) {
        Py_CLEAR(r->cache[k].shape);
        Py_CLEAR(r->cache[k].dt);
        Py_CLEAR(r->cache[k].shapes);
        Py_CLEAR(r->cache[k].meta);
    }
    return 0;
}

static void Recorder_dealloc(Recorder *r) {
    PyObject_GC_UnTrack(r);
    Recorder_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Recorder_repr(Recorder *r) {
    return PyUnicode_FromFormat("<gputape._native.Recorder of %R, %zd fast, %zd slow>", r->prim, r->fast, r->slow);
}

static PyMemberDef Recorder_members[] = {
    {"prim", T_OBJECT, offsetof(Recorder, prim), READONLY, "the primitive recorded"},
    {"fallback", T_OBJECT, offsetof(Recorder, fallback), READONLY, "the Python recorder (every unusual case)"},
    {"fast", T_PYSSIZET, offsetof(Recorder, fast), 0, "calls recorded here"},
    {"slow", T_PYSSIZET, offsetof(Recorder, slow), 0, "calls handed to the Python recorder"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Recorder, vectorcall), READONLY},
    {NULL}};

static PyTypeObject Recorder_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Recorder",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Recorder(prim, nargs, save, save_out, fallback): record(obs, x[, y], res) in C, else fallback.",
    .tp_new = Recorder_new,
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_traverse = (traverseproc)Recorder_traverse,
    .tp_clear = (inquiry)Recorder_clear,
    .tp_repr = (reprfunc)Recorder_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Recorder, vectorcall),
    .tp_members = Recorder_members,
};

/* ---- Structure ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *fallback; /* the Python _structure */
    PyObject *globals;  /* its module's: MAX_NODES and Node are read there */
    PyObject **pos;     /* cached ints 0..cap-1 and their complements ~k at pos[cap + k] */
    Py_ssize_t cap;
} Structure;

/* Positions k and ~k as (borrowed) ints, from the cache grown as needed. */
static PyObject *position(Structure *st, Py_ssize_t k, int neg) {
    if (k >= st->cap) {
        Py_ssize_t cap = st->cap ? st->cap : 256;
        while (cap <= k)
            cap *= 2;
        PyObject **pos = PyMem_Calloc(2 * cap, sizeof(PyObject *));
        if (pos == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < cap; i++) {
            if ((pos[i] = PyLong_FromSsize_t(i)) == NULL || (pos[cap + i] = PyLong_FromSsize_t(~i)) == NULL) {
                for (Py_ssize_t j = 0; j < 2 * cap; j++)
                    Py_XDECREF(pos[j]);
                PyMem_Free(pos);
                return NULL;
            }
        }
        for (Py_ssize_t j = 0; j < 2 * st->cap; j++)
            Py_DECREF(st->pos[j]);
        PyMem_Free(st->pos);
        st->pos = pos;
        st->cap = cap;
    }
    return st->pos[neg ? st->cap + k : k];
}

static int append_pos(Structure *st, PyObject *key, Py_ssize_t k, int neg) {
    PyObject *p = position(st, k, neg);
    return p == NULL ? -1 : PyList_Append(key, p);
}

/* The positions given to ids so far: _structure's slot dict as an open-addressing table of C integers
 * (a key needs no dict: only a compile reads the slots, and it asks the Python reference for them). */
typedef struct {
    Py_ssize_t *ids, *pos;
    size_t mask;
    Py_ssize_t n;
} Slots;
#define NO_ID PY_SSIZE_T_MIN /* (ids are positive; 0 marks a constant operand) */
#define NOT_INT (-2)         /* an id that is not an int of C size: the Python reference answers */

static int slots_init(Slots *t, size_t cap) {
    t->ids = PyMem_Malloc(cap * sizeof(Py_ssize_t));
    t->pos = PyMem_Malloc(cap * sizeof(Py_ssize_t));
    if (t->ids == NULL || t->pos == NULL) {
        PyMem_Free(t->ids);
        PyMem_Free(t->pos);
        t->ids = t->pos = NULL;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t k = 0; k < cap; k++)
        t->ids[k] = NO_ID;
    t->mask = cap - 1;
    t->n = 0;
    return 0;
}

static void slots_free(Slots *t) {
    PyMem_Free(t->ids);
    PyMem_Free(t->pos);
    t->ids = t->pos = NULL;
}

/* The table index of id (where it is, or where it goes). */
static inline size_t slots_index(const Slots *t, Py_ssize_t id) {
    size_t h = (size_t)id * (size_t)0x9E3779B97F4A7C15ull;
    size_t k = (h ^ (h >> 29)) & t->mask;
    while (t->ids[k] != NO_ID && t->ids[k] != id)
        k = (k + 1) & t->mask;
    return k;
}

/* Room for one more id (the table kept at most half full). */
static int slots_room(Slots *t) {
    if ((size_t)(2 * (t->n + 1)) <= t->mask + 1)
        return 0;
    Slots old = *t;
    if (slots_init(t, 2 * (old.mask + 1)) < 0) {
        *t = old;
        return -1;
    }
    for (size_t k = 0; k <= old.mask; k++)
        if (old.ids[k] != NO_ID) {
            size_t j = slots_index(t, old.ids[k]);
            t->ids[j] = old.ids[k];
            t->pos[j] = old.pos[k];
            t->n++;
        }
    slots_free(&old);
    return 0;
}

/* id's value, or NOT_INT (no error set) for anything but an int of C size; -1 with an error. */
static inline Py_ssize_t id_value(PyObject *i) {
    if (!PyLong_CheckExact(i))
        return NOT_INT;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < 0 || v > PY_SSIZE_T_MAX)
        return NOT_INT;
    return (Py_ssize_t)v;
}

/* The slot of id i: the one it has, or the next position (given to it). -1 on error, NOT_INT. */
static Py_ssize_t slot_of(Slots *t, PyObject *i, Py_ssize_t *nxt) {
    Py_ssize_t id = id_value(i);
    if (id < 0)
        return id;
    size_t k = slots_index(t, id);
    if (t->ids[k] == id)
        return t->pos[k];
    if (slots_room(t) < 0)
        return -1;
    k = slots_index(t, id);
    t->ids[k] = id;
    t->pos[k] = *nxt;
    t->n++;
    return (*nxt)++;
}

/* slot[i] = p, whether i had a slot or not. -1 on error, NOT_INT. */
static int slot_set(Slots *t, PyObject *i, Py_ssize_t p) {
    Py_ssize_t id = id_value(i);
    if (id < 0)
        return (int)id;
    size_t k = slots_index(t, id);
    if (t->ids[k] != id) {
        if (slots_room(t) < 0)
            return -1;
        k = slots_index(t, id);
        t->ids[k] = id;
        t->n++;
    }
    t->pos[k] = p;
    return 0;
}

static int contains(PyObject *set, PyObject *i) {
    return PyAnySet_Check(set) ? PySet_Contains(set, i) : PySequence_Contains(set, i);
}

/* An output id takes the next position (even one seen before: _structure's slot[out] = nxt). */
static int out_slot(Structure *st, Slots *slot, PyObject *rel, PyObject *key, PyObject *o, Py_ssize_t *nxt,
                    int grow, PyObject *outs) {
    int set = slot_set(slot, o, *nxt);
    if (set < 0)
        return set;
    PyObject *p;
    if (grow && PySet_Add(rel, o) < 0)
        return -1;
    int in = contains(rel, o);
    if (in < 0)
        return -1;
    p = position(st, *nxt, !in);
    (*nxt)++;
    if (p == NULL)
        return -1;
    return outs != NULL ? PyList_Append(outs, p) : PyList_Append(key, p);
}

static PyObject *structure(Structure *st, PyObject *tape, PyObject *seeds, PyObject *source_ids, PyObject *xp) {
    PyObject *node_t = PyDict_GetItemWithError(st->globals, s_Node);
    PyObject *maxo = node_t ? PyDict_GetItemWithError(st->globals, s_MAX_NODES) : NULL;
    if (maxo == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "gputape._native.Structure: Node or MAX_NODES missing");
        return NULL;
    }
    Py_ssize_t max_nodes = PyLong_AsSsize_t(maxo);
    if (max_nodes == -1 && PyErr_Occurred())
        return NULL;
    PyObject *nodes = NULL, *tt = NULL, *keep = NULL, *leaves = NULL, *rel = NULL, *key = NULL, *result = NULL,
             *outs = NULL;
    Slots table = {NULL, NULL, 0, 0}, *slot = &table;
    Py_ssize_t got;
    PyObject *seq = NULL, *it = NULL, *item = NULL, *held[5] = {NULL, NULL, NULL, NULL, NULL};
    if ((nodes = PyObject_GetAttr(tape, s_nodes)) == NULL)
        goto fail;
    if (!PyList_CheckExact(nodes)) /* (never, from a GradientTape) */
        goto python;
    if (PyList_GET_SIZE(nodes) > max_nodes) {
        result = Py_NewRef(s_too_many_nodes);
        goto fail;
    }
    if ((tt = PyObject_GetAttr(tape, s_tensors)) == NULL || (keep = PySet_New(source_ids)) == NULL ||
        (leaves = PyObject_GetAttr(tape, s_leaves)) == NULL)
        goto fail;
    int subset = PyObject_RichCompareBool(leaves, keep, Py_LE);
    if (subset < 0)
        goto fail;
    int forward = !subset;
    if (subset) {
        rel = Py_NewRef(tt);
    } else {
        if ((rel = PySet_New(NULL)) == NULL || (it = PyObject_GetIter(source_ids)) == NULL)
            goto fail;
        while ((item = PyIter_Next(it)) != NULL) {
            int in = PySequence_Contains(tt, item);
            if (in < 0 || (in && PySet_Add(rel, item) < 0))
                goto fail;
            Py_CLEAR(item);
        }
        Py_CLEAR(it);
        if (PyErr_Occurred())
            goto fail;
        if (PySet_GET_SIZE(rel) == 0) {
            result = Py_NewRef(s_no_source_recorded);
            goto fail;
        }
    }
    PyObject *persistent = PyObject_GetAttr(tape, s_persistent);
    if (persistent == NULL || slots_init(slot, 64) < 0) {
        Py_XDECREF(persistent);
        goto fail;
    }
    key = PyList_New(3);
    if (key == NULL) {
        Py_DECREF(persistent);
        goto fail;
    }
    PyList_SET_ITEM(key, 0, Py_NewRef(xp));
    PyList_SET_ITEM(key, 1, persistent);
    PyList_SET_ITEM(key, 2, PyBool_FromLong(forward));
    Py_ssize_t nxt = 0;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(nodes); j++) {
        PyObject *n = PyList_GET_ITEM(nodes, j);
        if ((PyObject *)Py_TYPE(n) != node_t) { /* a Swept record: its residuals are gone */
            result = Py_NewRef(s_already_swept);
            goto fail;
        }
        Py_INCREF(n); /* (held: the list may change while this node is read) */
        item = n;
        PyObject *ids = SLOT(n, off_n_ids), *out = SLOT(n, off_n_out), *prim = SLOT(n, off_n_prim);
        PyObject *shapes = SLOT(n, off_n_shapes), *casts = SLOT(n, off_n_casts);
        if (ids == NULL || out == NULL || prim == NULL || shapes == NULL || casts == NULL) {
            PyErr_SetString(PyExc_AttributeError, "gputape._native.Structure: a Node with unset fields");
            goto fail;
        }
        /* (held, as the node is: a collection's finalizers may run between here and their use) */
        held[0] = Py_NewRef(ids), held[1] = Py_NewRef(out), held[2] = Py_NewRef(prim);
        held[3] = Py_NewRef(shapes), held[4] = Py_NewRef(casts);
        if ((seq = PySequence_Fast(ids, "Node.ids must be a sequence")) == NULL)
            goto fail;
        int hit = 0;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
            PyObject *i = PySequence_Fast_GET_ITEM(seq, k);
            Py_ssize_t s = slot_of(slot, i, &nxt);
            if (s < 0) {
                got = s;
                goto bad_out;
            }
            int in = contains(rel, i);
            if (in < 0)
                goto fail;
            hit |= in;
            if (append_pos(st, key, s, !in) < 0)
                goto fail;
        }
        Py_CLEAR(seq);
        if (PyLong_CheckExact(out)) {
            if ((got = out_slot(st, slot, rel, key, out, &nxt, forward && hit, NULL)) < 0)
                goto bad_out;
        } else {
            if ((seq = PySequence_Fast(out, "Node.out must be an int or a sequence")) == NULL ||
                (outs = PyList_New(0)) == NULL)
                goto fail;
            for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++)
                if ((got = out_slot(st, slot, rel, key, PySequence_Fast_GET_ITEM(seq, k), &nxt, forward && hit,
                                    outs)) < 0)
                    goto bad_out;
            Py_CLEAR(seq);
            PyObject *t = PyList_AsTuple(outs);
            Py_CLEAR(outs);
            if (t == NULL)
                goto fail;
            int bad = PyList_Append(key, t);
            Py_DECREF(t);
            if (bad < 0)
                goto fail;
        }
        /* (an exact Primitive's slot read directly; anything else, or an unset slot, by getattr) */
        PyObject *vjp = ready && Py_TYPE(prim) == Primitive_T ? SLOT(prim, off_p_vjp) : NULL;
        if (vjp != NULL)
            Py_INCREF(vjp);
        else if ((vjp = PyObject_GetAttr(prim, s_vjp)) == NULL)
            goto fail;
        int bad = PyList_Append(key, vjp);
        Py_DECREF(vjp);
        if (bad < 0 || PyList_Append(key, shapes) < 0)
            goto fail;
        if (casts != Py_None) {
            PyObject *t = PySequence_Tuple(casts);
            if (t == NULL)
                goto fail;
            bad = PyList_Append(key, t);
            Py_DECREF(t);
            if (bad < 0)
                goto fail;
        }
        for (int k = 0; k < 5; k++)
            Py_CLEAR(held[k]);
        Py_CLEAR(item);
    }
    PyObject *markers[2] = {s_seeds, s_sources}, *lists[2] = {seeds, source_ids};
    for (int m = 0; m < 2; m++) {
        if (PyList_Append(key, markers[m]) < 0 || (it = PyObject_GetIter(lists[m])) == NULL)
            goto fail;
        while ((item = PyIter_Next(it)) != NULL) {
            Py_ssize_t s = slot_of(slot, item, &nxt);
            if (s < 0) {
                got = s;
                goto bad_out;
            }
            if (append_pos(st, key, s, 0) < 0)
                goto fail;
            Py_CLEAR(item);
        }
        Py_CLEAR(it);
        if (PyErr_Occurred())
            goto fail;
    }
    PyObject *tkey = PyList_AsTuple(key);
    if (tkey == NULL)
        goto fail;
    result = PyTuple_Pack(3, tkey, Py_None, rel); /* (no slot dict: see Slots) */
    Py_DECREF(tkey);
    goto fail;
bad_out:
    if (got != NOT_INT)
        goto fail;
python: /* an id that is not a C-sized int (never, from gputape's tensors): the Python reference */
    {
        PyObject *args[4] = {tape, seeds, source_ids, xp};
        result = PyObject_Vectorcall(st->fallback, args, 4, NULL);
    }
fail:
    for (int k = 0; k < 5; k++)
        Py_XDECREF(held[k]);
    Py_XDECREF(item);
    Py_XDECREF(it);
    Py_XDECREF(seq);
    Py_XDECREF(outs);
    Py_XDECREF(nodes);
    Py_XDECREF(tt);
    Py_XDECREF(keep);
    Py_XDECREF(leaves);
    Py_XDECREF(rel);
    slots_free(slot);
    Py_XDECREF(key);
    return result;
}

static PyObject *Structure_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || n != 4) {
        PyErr_Format(PyExc_TypeError, "gputape._native.Structure: takes (tape, seeds, source_ids, xp), got %zd", n);
        return NULL;
    }
    return structure((Structure *)self, args[0], args[1], args[2], args[3]);
}

static PyObject *Structure_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"fallback", NULL};
    PyObject *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:Structure", kw, &PyFunction_Type, &fallback))
        return NULL;
    Structure *st = (Structure *)type->tp_alloc(type, 0);
    if (st == NULL)
        return NULL;
    st->vectorcall = Structure_vectorcall;
    st->fallback = Py_NewRef(fallback);
    st->globals = Py_NewRef(PyFunction_GET_GLOBALS(fallback));
    return (PyObject *)st;
}

static int Structure_traverse(Structure *st, visitproc visit, void *arg) {
    Py_VISIT(st->fallback);
    Py_VISIT(st->globals);
    return 0;
}

static int Structure_clear(Structure *st) {
    Py_CLEAR(st->fallback);
    Py_CLEAR(st->globals);
    return 0;
}

static void Structure_dealloc(Structure *st) {
    PyObject_GC_UnTrack(st);
    Structure_clear(st);
    for (Py_ssize_t j = 0; j < 2 * st->cap; j++)
        Py_DECREF(st->pos[j]);
    PyMem_Free(st->pos);
    Py_TYPE(st)->tp_free((PyObject *)st);
}

static PyMemberDef Structure_members[] = {
    {"fallback", T_OBJECT, offsetof(Structure, fallback), READONLY, "the Python _structure this computes"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Structure, vectorcall), READONLY},
    {NULL}};

static PyTypeObject Structure_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Structure",
    .tp_basicsize = sizeof(Structure),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Structure(_structure): _backward_compile._structure(tape, seeds, source_ids, xp) in C.",
    .tp_new = Structure_new,
    .tp_dealloc = (destructor)Structure_dealloc,
    .tp_traverse = (traverseproc)Structure_traverse,
    .tp_clear = (inquiry)Structure_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Structure, vectorcall),
    .tp_members = Structure_members,
};

/* ---- Entry -------------------------------------------------------------------------------- */

/* A generated entry point (gputape.dispatch._UNARY/_BINARY) in C. Everything it uses is read
 * from the generated function's namespace when it is made, so it computes what that function
 * computes; the fast path is host tensors (and, beside one, a Python float or int) with no
 * profiler and no observer hooks; every other call is the function's, before anything here was
 * observable. When the forward raises, the function's own code runs on the same arguments with
 * its forward replaced by one that raises that exception again (the ufunc is not called twice:
 * no warning is emitted twice): its except clause wraps it (op_error, raised from it), in its
 * frame, whose parameter names and code gputape._errors reads for the message. */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *fallback; /* the generated Python function */
    PyObject *prim, *cpu, *fwd, *np, *record, *same;
    PyObject *state, *tls; /* gputape._state's __dict__ (anywhere, profiler) and its thread-local */
    PyObject *literals, *literal_miss; /* NULL: the function hands its ufunc numbers as they are */
    PyObject *fix_output, *next_id;
    PyObject *dict; /* __name__, __qualname__, __doc__, __module__ */
    int nargs;
    Py_ssize_t fast, slow;
} Entry;

static PyTypeObject Entry_T;
static PyObject *s_anywhere, *s_profiler, *s_obs, *s_qualname, *s_LITERALS, *s_cpu, *s_fwd, *s_same_op;

/* What entry_fast returns when nothing was done: the caller's Python function takes the call. */
static PyObject SLOW_MARK;
#define SLOW (&SLOW_MARK)

/* Raise(exc): a forward that raises exc again, with its traceback. */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *tp, *val, *tb;
} Raise;

static PyObject *Raise_vectorcall(PyObject *self, PyObject *const *Py_UNUSED(a), size_t Py_UNUSED(n),
                                  PyObject *Py_UNUSED(k)) {
    Raise *r = (Raise *)self;
    PyErr_Restore(Py_NewRef(r->tp), Py_NewRef(r->val), Py_XNewRef(r->tb));
    return NULL;
}

static int Raise_traverse(Raise *r, visitproc visit, void *arg) {
    Py_VISIT(r->tp);
    Py_VISIT(r->val);
    Py_VISIT(r->tb);
    return 0;
}

static int Raise_clear(Raise *r) {
    Py_CLEAR(r->tp);
    Py_CLEAR(r->val);
    Py_CLEAR(r->tb);
    return 0;
}

static void Raise_dealloc(Raise *r) {
    PyObject_GC_UnTrack(r);
    Raise_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyTypeObject Raise_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Raise",
    .tp_basicsize = sizeof(Raise),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A failed forward, raised again when an entry point's Python code replays the call.",
    .tp_dealloc = (destructor)Raise_dealloc,
    .tp_traverse = (traverseproc)Raise_traverse,
    .tp_clear = (inquiry)Raise_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Raise, vectorcall),
};

/* e's Python function over a copy of its namespace with cpu and fwd raising (tp, val, tb), and
 * same_op replaced when given (a new reference). */
static PyObject *replay(Entry *e, PyObject *tp, PyObject *val, PyObject *tb, PyObject *same_op) {
    Raise *r = PyObject_GC_New(Raise, &Raise_T);
    if (r == NULL)
        return NULL;
    r->vectorcall = Raise_vectorcall;
    r->tp = Py_NewRef(tp), r->val = Py_NewRef(val), r->tb = Py_XNewRef(tb);
    PyObject_GC_Track(r);
    PyObject *fn = NULL, *ns = PyDict_Copy(PyFunction_GET_GLOBALS(e->fallback));
    if (ns != NULL && PyDict_SetItem(ns, s_cpu, (PyObject *)r) == 0 && PyDict_SetItem(ns, s_fwd, (PyObject *)r) == 0 &&
        (same_op == NULL || PyDict_SetItem(ns, s_same_op, same_op) == 0))
        fn = PyFunction_New(PyFunction_GET_CODE(e->fallback), ns);
    Py_XDECREF(ns);
    Py_DECREF(r);
    return fn;
}

/* Who called entry_fast, whose Python code wraps a failed forward around the entry's: the two-operand
 * entry whose x * x this is (parent), and the reflected operator's Python function (rop, see
 * Swapped) that calls the entry with its operands swapped, each with its own arguments. */
typedef struct {
    Entry *parent;
    PyObject *const *pargs;
    PyObject *rop;
    PyObject *const *rargs;
} Outer;

/* rop's code over its globals, with fn in the cell of the entry it calls (a new reference). */
static PyObject *rewrap(PyObject *rop, PyObject *fn) {
    PyObject *cell = PyCell_New(fn), *closure = cell ? PyTuple_Pack(1, cell) : NULL;
    PyObject *r = closure ? PyFunction_New(PyFunction_GET_CODE(rop), PyFunction_GET_GLOBALS(rop)) : NULL;
    if (r != NULL && PyFunction_SetClosure(r, closure) < 0)
        Py_CLEAR(r);
    Py_XDECREF(closure);
    Py_XDECREF(cell);
    return r;
}

/* The forward failed: the Python code's handling of its exception (see above), with the functions
 * of the outer callers around it when given. */
static PyObject *entry_error(Entry *e, PyObject *const *args, const Outer *outer) {
    PyObject *tp, *val, *tb;
    PyErr_Fetch(&tp, &val, &tb);
    PyErr_NormalizeException(&tp, &val, &tb);
    if (tp == NULL || !PyErr_GivenExceptionMatches(tp, PyExc_Exception)) {
        PyErr_Restore(tp, val, tb); /* (KeyboardInterrupt and the like: not the template's to catch) */
        return NULL;
    }
    if (tb != NULL)
        PyException_SetTraceback(val, tb);
    PyObject *res = NULL, *fn = replay(e, tp, val, tb, NULL);
    Py_ssize_t nargs = e->nargs;
    if (fn != NULL && outer != NULL && outer->parent != NULL) {
        Py_SETREF(fn, replay(outer->parent, tp, val, tb, fn));
        args = outer->pargs, nargs = outer->parent->nargs;
    }
    if (fn != NULL && outer != NULL && outer->rop != NULL) {
        Py_SETREF(fn, rewrap(outer->rop, fn));
        args = outer->rargs, nargs = 2;
    }
    if (fn != NULL) {
        res = PyObject_Vectorcall(fn, args, nargs, NULL);
        Py_DECREF(fn);
    }
    Py_DECREF(tp);
    Py_DECREF(val);
    Py_XDECREF(tb);
    return res;
}

/* Whether the state lets this call run here: 1 (with *obs a new reference, maybe None), 0 (take the
 * Python function), -1 on error. */
static int entry_observers(Entry *e, PyObject **obs) {
    PyObject *any = PyDict_GetItemWithError(e->state, s_anywhere);
    if (any == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int on = PyObject_IsTrue(any);
    if (on < 0)
        return -1;
    if (on == 0) {
        *obs = Py_NewRef(Py_None);
        return 1;
    }
    PyObject *prof = PyDict_GetItemWithError(e->state, s_profiler);
    if (prof != Py_None)
        return prof == NULL && PyErr_Occurred() ? -1 : 0; /* (the profiled path: apply) */
    PyObject *o = PyObject_GetAttr(e->tls, s_obs);
    if (o == NULL)
        return -1;
    if (o != Py_None) {
        /* hooks (a trace, check_numerics, watchers) run with the generated frame on the stack */
        PyObject *hooks = Py_IS_TYPE(o, Observers_T) ? SLOT(o, off_o_hooks) : NULL;
        if (hooks != Py_False) {
            Py_DECREF(o);
            return 0;
        }
    }
    *obs = o;
    return 1;
}

/* The typed number for v beside host array d, as _TYPED computes it: 1 (with *got), 0 (a table that
 * is not one: the Python function), -1 on error. */
static int entry_typed(Entry *e, PyObject *v, PyObject *d, PyObject **got) {
    PyObject *t = PyDict_GetItemWithError(e->literals, v);
    if (t != NULL) {
        Py_INCREF(t);
    } else {
        if (PyErr_Occurred())
            return -1;
        if ((t = PyObject_CallOneArg(e->literal_miss, v)) == NULL)
            return -1;
    }
    if (!is_table(t)) {
        Py_DECREF(t);
        return 0;
    }
    PyObject *dt = dtype_of(d);
    if (dt == NULL) {
        Py_DECREF(t);
        return -1;
    }
    PyObject *r = PyDict_GetItemWithError(t, dt);
    Py_DECREF(dt);
    if (r == NULL && PyErr_Occurred()) {
        Py_DECREF(t);
        return -1;
    }
    *got = Py_NewRef(r != NULL ? r : v);
    Py_DECREF(t);
    return 1;
}

static inline int is_number(PyObject *v) { return PyFloat_CheckExact(v) || PyLong_CheckExact(v); }

/* The call, or SLOW when it is the Python function's (nothing done), or NULL on error. outer: the
 * callers whose Python code wraps an error (NULL: none). */
static PyObject *entry_fast(Entry *e, PyObject *const *args, const Outer *outer) {
    PyObject *x = args[0], *y = e->nargs == 2 ? args[1] : NULL;
    PyObject *a = NULL, *b = NULL, *obs = NULL, *out = NULL;
    int got;
    /* (each array held once read: a literal_miss call may run other code) */
    if (y == NULL) {
        if (!PyObject_TypeCheck(x, Tensor_T))
            return SLOW;
    } else if (PyObject_TypeCheck(x, Tensor_T)) {
        a = SLOT(x, off_t_data);
        if (a == NULL || !Py_IS_TYPE(a, ndarray_T))
            return SLOW;
        if (PyObject_TypeCheck(y, Tensor_T)) {
            if (e->same != NULL && x == y) {
                if (!Py_IS_TYPE(e->same, &Entry_T))
                    return SLOW;
                Outer in = {e, args, outer ? outer->rop : NULL, outer ? outer->rargs : NULL};
                return entry_fast((Entry *)e->same, args, &in);
            }
            b = SLOT(y, off_t_data);
            if (b == NULL || !Py_IS_TYPE(b, ndarray_T))
                return SLOW;
            Py_INCREF(a);
            Py_INCREF(b);
        } else if (!is_number(y)) {
            return SLOW;
        } else {
            Py_INCREF(a);
            if (e->literals == NULL) {
                b = Py_NewRef(y);
            } else if ((got = entry_typed(e, y, a, &b)) <= 0) {
                Py_DECREF(a);
                return got < 0 ? NULL : SLOW;
            }
        }
    } else if (PyObject_TypeCheck(y, Tensor_T) && is_number(x)) {
        b = SLOT(y, off_t_data);
        if (b == NULL || !Py_IS_TYPE(b, ndarray_T))
            return SLOW;
        Py_INCREF(b);
        if (e->literals == NULL) {
            a = Py_NewRef(x);
        } else if ((got = entry_typed(e, x, b, &a)) <= 0) {
            Py_DECREF(b);
            return got < 0 ? NULL : SLOW;
        }
    } else {
        return SLOW;
    }
    /* held from here on: a and b (none yet for one operand) */
    int on = entry_observers(e, &obs);
    if (on > 0 && y == NULL) {
        a = SLOT(x, off_t_data);
        if (a == NULL || !Py_IS_TYPE(a, ndarray_T)) {
            Py_DECREF(obs);
            return SLOW;
        }
        Py_INCREF(a);
    }
    if (on <= 0) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return on < 0 ? NULL : SLOW;
    }
    e->fast++;
    if (e->cpu != NULL) {
        PyObject *fa[2] = {a, b};
        out = PyObject_Vectorcall(e->cpu, fa, e->nargs, NULL);
    } else {
        PyObject *fa[3] = {e->np, a, b};
        out = PyObject_Vectorcall(e->fwd, fa, e->nargs + 1, NULL);
    }
    Py_DECREF(a);
    Py_XDECREF(b);
    if (out == NULL) {
        Py_DECREF(obs);
        return entry_error(e, args, outer);
    }
    if (!Py_IS_TYPE(out, ndarray_T)) {
        Py_SETREF(out, PyObject_CallOneArg(e->fix_output, out));
        if (out == NULL) {
            Py_DECREF(obs);
            return NULL;
        }
    }
    PyObject *res = Tensor_T->tp_alloc(Tensor_T, 0);
    if (res == NULL) {
        Py_DECREF(out);
        Py_DECREF(obs);
        return NULL;
    }
    put(res, off_t_data, out);
    PyObject *rid = PyObject_CallNoArgs(e->next_id);
    if (rid == NULL) {
        Py_DECREF(res);
        Py_DECREF(obs);
        return NULL;
    }
    put(res, off_t_id, rid);
    if (obs != Py_None) {
        PyObject *ra[4] = {obs, x, y != NULL ? y : res, res};
        /* a C recorder's common case called directly (its vectorcall is the same but for the call) */
        Recorder *rec = Py_IS_TYPE(e->record, &Recorder_T) ? (Recorder *)e->record : NULL;
        int got = rec != NULL && rec->nargs == e->nargs ? record_fast(rec, ra) : 2;
        if (got == 0) {
            rec->fast++;
        } else {
            if (got == 1)
                rec->slow++;
            PyObject *to = got == 1 ? rec->fallback : e->record;
            PyObject *r = got < 0 ? NULL : PyObject_Vectorcall(to, ra, e->nargs + 2, NULL);
            if (r == NULL) {
                Py_DECREF(res);
                Py_DECREF(obs);
                return NULL;
            }
            Py_DECREF(r);
        }
    }
    Py_DECREF(obs);
    return res;
}

static PyObject *Entry_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Entry *e = (Entry *)self;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == e->nargs && ready) {
        PyObject *r = entry_fast(e, args, NULL);
        if (r != SLOW)
            return r;
    }
    e->slow++;
    return PyObject_Vectorcall(e->fallback, args, nargsf, kwnames);
}

/* Read name from the generated function's namespace (a new reference; NULL and an error if absent,
 * or NULL and no error when optional). */
static PyObject *from_globals(PyObject *g, const char *name, int optional) {
    PyObject *v = PyDict_GetItemString(g, name);
    if (v == NULL && !optional)
        PyErr_Format(PyExc_KeyError, "gputape._native.Entry: the generated namespace has no %s", name);
    return Py_XNewRef(v);
}

static PyObject *Entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"fallback", NULL};
    PyObject *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:Entry", kw, &PyFunction_Type, &fallback))
        return NULL;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "gputape._native.Entry: setup() has not run");
        return NULL;
    }
    PyCodeObject *code = (PyCodeObject *)PyFunction_GET_CODE(fallback);
    int nargs = code->co_argcount;
    if ((nargs != 1 && nargs != 2) || PyFunction_GET_DEFAULTS(fallback) != NULL || PyFunction_GET_CLOSURE(fallback)) {
        PyErr_Format(PyExc_ValueError, "gputape._native.Entry: a generated entry of 1 or 2 operands, got %d", nargs);
        return NULL;
    }
    PyObject *g = PyFunction_GET_GLOBALS(fallback);
    Entry *e = (Entry *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    e->vectorcall = Entry_vectorcall;
    e->fallback = Py_NewRef(fallback);
    e->nargs = nargs;
    PyObject *state = NULL;
    int typed = PySequence_Contains(code->co_names, s_LITERALS);
    if (typed < 0 || (e->prim = from_globals(g, "prim", 0)) == NULL || (e->fwd = from_globals(g, "fwd", 0)) == NULL ||
        (e->np = from_globals(g, "np", 0)) == NULL || (e->record = from_globals(g, "record", 0)) == NULL ||
        (state = from_globals(g, "state", 0)) == NULL || (e->tls = from_globals(g, "tls", 0)) == NULL ||
        (e->fix_output = from_globals(g, "fix_output", 0)) == NULL ||
        (e->next_id = from_globals(g, "next_id", 0)) == NULL)
        goto fail;
    e->cpu = from_globals(g, "cpu", 1);
    if (e->cpu == Py_None)
        Py_CLEAR(e->cpu);
    e->same = from_globals(g, "same_op", 1);
    if (typed && ((e->literals = from_globals(g, "LITERALS", 0)) == NULL ||
                  (e->literal_miss = from_globals(g, "literal_miss", 0)) == NULL))
        goto fail;
    if (e->literals != NULL && !PyDict_CheckExact(e->literals)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.Entry: LITERALS must be a dict");
        goto fail;
    }
    if (!PyModule_Check(state)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.Entry: state must be gputape._state");
        goto fail;
    }
    e->state = Py_NewRef(PyModule_GetDict(state));
    Py_DECREF(state);
    return (PyObject *)e;
fail:
    Py_XDECREF(state);
    Py_DECREF(e);
    return NULL;
}

static int Entry_traverse(Entry *e, visitproc visit, void *arg) {
    Py_VISIT(e->fallback);
    Py_VISIT(e->prim);
    Py_VISIT(e->cpu);
    Py_VISIT(e->fwd);
    Py_VISIT(e->np);
    Py_VISIT(e->record);
    Py_VISIT(e->same);
    Py_VISIT(e->state);
    Py_VISIT(e->tls);
    Py_VISIT(e->literals);
    Py_VISIT(e->literal_miss);
    Py_VISIT(e->fix_output);
    Py_VISIT(e->next_id);
    Py_VISIT(e->dict);
    return 0;
}

static int Entry_clear(Entry *e) {
    Py_CLEAR(e->fallback);
    Py_CLEAR(e->prim);
    Py_CLEAR(e->cpu);
    Py_CLEAR(e->fwd);
    Py_CLEAR(e->np);
    Py_CLEAR(e->record);
    Py_CLEAR(e->same);
    Py_CLEAR(e->state);
    Py_CLEAR(e->tls);
    Py_CLEAR(e->literals);
    Py_CLEAR(e->literal_miss);
    Py_CLEAR(e->fix_output);
    Py_CLEAR(e->next_id);
    Py_CLEAR(e->dict);
    return 0;
}

static void Entry_dealloc(Entry *e) {
    PyObject_GC_UnTrack(e);
    Entry_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* As a function: bound when read from an instance (x.__mul__), unbound for the interpreter's slots. */
static PyObject *Entry_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type)) {
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *Entry_repr(Entry *e) {
    PyObject *q = e->dict ? PyDict_GetItemWithError(e->dict, s_qualname) : NULL;
    if (q == NULL && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromFormat("<gputape op %S (C entry)>", q ? q : (PyObject *)Py_TYPE(e->fallback));
}

/* Introspection reads the function's own attributes (__code__, __globals__, __defaults__, ...) where
 * this object has none of that name. */
static PyObject *getattr_or(PyObject *self, PyObject *name, PyObject *fallback) {
    PyObject *v = PyObject_GenericGetAttr(self, name);
    if (v != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError) || !PyUnicode_Check(name) ||
        PyUnicode_READ_CHAR(name, 0) != '_' || PyUnicode_GET_LENGTH(name) < 2 || PyUnicode_READ_CHAR(name, 1) != '_')
        return v;
    PyErr_Clear();
    return PyObject_GetAttr(fallback, name);
}

static PyObject *Entry_getattro(PyObject *self, PyObject *name) {
    return getattr_or(self, name, ((Entry *)self)->fallback);
}

/* Pickled by name, as the function it stands for is. */
static PyObject *Entry_reduce(PyObject *e, PyObject *Py_UNUSED(a)) { return PyObject_GetAttr(e, s_qualname); }

static PyMethodDef Entry_methods[] = {{"__reduce__", Entry_reduce, METH_NOARGS, NULL}, {NULL}};

static PyGetSetDef Entry_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

static PyMemberDef Entry_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Entry, fallback), READONLY, "the generated Python function (every other call)"},
    {"prim", T_OBJECT, offsetof(Entry, prim), READONLY, "the primitive"},
    {"fast", T_PYSSIZET, offsetof(Entry, fast), 0, "calls computed here"},
    {"slow", T_PYSSIZET, offsetof(Entry, slow), 0, "calls handed to the Python function"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Entry, vectorcall), READONLY},
    {NULL}};

static PyTypeObject Entry_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Entry(function): a generated entry point of gputape.dispatch in C, else that function.",
    .tp_new = Entry_new,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
    .tp_repr = (reprfunc)Entry_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Entry, vectorcall),
    .tp_descr_get = Entry_get,
    .tp_dictoffset = offsetof(Entry, dict),
    .tp_methods = Entry_methods,
    .tp_members = Entry_members,
    .tp_getset = Entry_getset,
    .tp_getattro = Entry_getattro,
};

/* ---- Swapped: the reflected operators ----------------------------------------------------- */

/* Swapped(rop): ``rop(self, other)``, the Python function gputape.ops makes for a reflected operator
 * (``__radd__`` and the like), which calls the entry in its closure as ``f(other, self)``. The call
 * that entry computes in C runs here, the operands swapped; every other call is rop's, first (the
 * entry then sees the call and counts it, as it did). A failed forward is wrapped by rop's code
 * around the entry's (see entry_error), so an error is the one rop's call gives: it names the op's own
 * parameters (rop is a forwarder, see gputape._errors.forwarder). */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *rop, *entry;
    PyObject *dict; /* __name__, __qualname__, __doc__, __module__ */
} Swapped;

static PyTypeObject Swapped_T;

static PyObject *Swapped_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Swapped *sw = (Swapped *)self;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == 2 && ready) {
        PyObject *swapped[2] = {args[1], args[0]};
        Outer outer = {NULL, NULL, sw->rop, args};
        PyObject *r = entry_fast((Entry *)sw->entry, swapped, &outer);
        if (r != SLOW)
            return r;
    }
    return PyObject_Vectorcall(sw->rop, args, nargsf, kwnames);
}

static PyObject *Swapped_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"rop", NULL};
    PyObject *rop;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!:Swapped", kw, &PyFunction_Type, &rop))
        return NULL;
    PyCodeObject *code = (PyCodeObject *)PyFunction_GET_CODE(rop);
    PyObject *closure = PyFunction_GET_CLOSURE(rop);
    PyObject *f = closure != NULL && PyTuple_GET_SIZE(closure) == 1 ? PyCell_GET(PyTuple_GET_ITEM(closure, 0)) : NULL;
    if (code->co_argcount != 2 || code->co_kwonlyargcount != 0 || (code->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) ||
        PyFunction_GET_DEFAULTS(rop) != NULL || f == NULL || !Py_IS_TYPE(f, &Entry_T) || ((Entry *)f)->nargs != 2) {
        PyErr_SetString(PyExc_ValueError,
                        "gputape._native.Swapped: a function rop(self, other) whose one closure cell holds a "
                        "two-operand Entry");
        return NULL;
    }
    Swapped *sw = (Swapped *)type->tp_alloc(type, 0);
    if (sw == NULL)
        return NULL;
    sw->vectorcall = Swapped_vectorcall;
    sw->rop = Py_NewRef(rop);
    sw->entry = Py_NewRef(f); /* (held: the cell is rop's, and entry_fast reads it without a reference) */
    return (PyObject *)sw;
}

static int Swapped_traverse(Swapped *sw, visitproc visit, void *arg) {
    Py_VISIT(sw->rop);
    Py_VISIT(sw->entry);
    Py_VISIT(sw->dict);
    return 0;
}

static int Swapped_clear(Swapped *sw) {
    Py_CLEAR(sw->rop);
    Py_CLEAR(sw->entry);
    Py_CLEAR(sw->dict);
    return 0;
}

static void Swapped_dealloc(Swapped *sw) {
    PyObject_GC_UnTrack(sw);
    Swapped_clear(sw);
    Py_TYPE(sw)->tp_free((PyObject *)sw);
}

static PyObject *Swapped_repr(Swapped *sw) {
    PyObject *q = sw->dict ? PyDict_GetItemWithError(sw->dict, s_qualname) : NULL;
    if (q == NULL && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromFormat("<gputape reflected op %S (C entry)>", q ? q : (PyObject *)Py_TYPE(sw->rop));
}

static PyObject *Swapped_getattro(PyObject *self, PyObject *name) {
    return getattr_or(self, name, ((Swapped *)self)->rop);
}

static PyMemberDef Swapped_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Swapped, rop), READONLY, "the Python function (every other call)"},
    {"entry", T_OBJECT, offsetof(Swapped, entry), READONLY, "the entry it calls with the operands swapped"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Swapped, vectorcall), READONLY},
    {NULL}};

static PyTypeObject Swapped_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Swapped",
    .tp_basicsize = sizeof(Swapped),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "Swapped(rop): a reflected operator rop(self, other) = entry(other, self), the entry's call in C.",
    .tp_new = Swapped_new,
    .tp_dealloc = (destructor)Swapped_dealloc,
    .tp_traverse = (traverseproc)Swapped_traverse,
    .tp_clear = (inquiry)Swapped_clear,
    .tp_repr = (reprfunc)Swapped_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Swapped, vectorcall),
    .tp_descr_get = Entry_get,
    .tp_dictoffset = offsetof(Swapped, dict),
    .tp_methods = Entry_methods,
    .tp_members = Swapped_members,
    .tp_getset = Entry_getset,
    .tp_getattro = Swapped_getattro,
};

/* ---- Results ------------------------------------------------------------------------------ */

/* gputape.tape._results(grads, flat_s, unconnected, diff): each source's gradient as a Tensor. The
 * common case (a C-contiguous host array for a source of a float dtype, no tape recording the
 * gradient) is wrapped here as tensor._wrap does; any other pair is _result(g, s, unconnected, diff,
 * None)'s, called with it (which gives the same for a pair this could have wrapped). */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *fallback; /* the Python _results */
    PyObject *result;   /* tape._result */
    PyObject *next_id;  /* tensor._next_const_id */
} Results;

static int wrappable(PyObject *g, PyObject *s) {
    if (!IS_DIRECT(g) || !(((const ArrayHead *)g)->flags & C_CONTIGUOUS))
        return 0;
    if (!Py_IS_TYPE(s, Tensor_T) && !Py_IS_TYPE(s, Variable_T))
        return 0;
    PyObject *d = SLOT(s, off_t_data);
    return d != NULL && IS_DIRECT(d) && is_float(((const ArrayHead *)d)->descr);
}

static PyObject *Results_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Results *r = (Results *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || n != 4 || !ready || !PyList_CheckExact(args[1]))
        return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
    int diff = PyObject_IsTrue(args[3]);
    if (diff < 0)
        return NULL;
    PyObject *grads = PySequence_Fast(args[0], "_results: grads must be a sequence");
    if (grads == NULL)
        return NULL;
    PyObject *flat_s = Py_NewRef(args[1]);
    Py_ssize_t m = PyList_GET_SIZE(flat_s);
    if (PySequence_Fast_GET_SIZE(grads) < m)
        m = PySequence_Fast_GET_SIZE(grads);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t k = 0; out != NULL && k < m && k < PyList_GET_SIZE(flat_s); k++) {
        PyObject *g = Py_NewRef(PySequence_Fast_GET_ITEM(grads, k)), *s = Py_NewRef(PyList_GET_ITEM(flat_s, k));
        PyObject *t = NULL;
        if (!diff && wrappable(g, s)) {
            PyObject *id = PyObject_CallNoArgs(r->next_id);
            if (id != NULL && (t = Tensor_T->tp_alloc(Tensor_T, 0)) != NULL) {
                put(t, off_t_data, Py_NewRef(g));
                put(t, off_t_id, id);
            } else {
                Py_XDECREF(id);
            }
        } else {
            PyObject *a[5] = {g, s, args[2], args[3], Py_None};
            t = PyObject_Vectorcall(r->result, a, 5, NULL);
        }
        Py_DECREF(g);
        Py_DECREF(s);
        if (t == NULL || PyList_Append(out, t) < 0)
            Py_CLEAR(out);
        Py_XDECREF(t);
    }
    Py_DECREF(grads);
    Py_DECREF(flat_s);
    return out;
}

static PyObject *Results_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"fallback", "result", "next_id", NULL};
    PyObject *fallback, *result, *next_id;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:Results", kw, &fallback, &result, &next_id))
        return NULL;
    if (!PyCallable_Check(fallback) || !PyCallable_Check(result) || !PyCallable_Check(next_id)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.Results: pass _results, _result and _next_const_id");
        return NULL;
    }
    Results *r = (Results *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->vectorcall = Results_vectorcall;
    r->fallback = Py_NewRef(fallback);
    r->result = Py_NewRef(result);
    r->next_id = Py_NewRef(next_id);
    return (PyObject *)r;
}

static int Results_traverse(Results *r, visitproc visit, void *arg) {
    Py_VISIT(r->fallback);
    Py_VISIT(r->result);
    Py_VISIT(r->next_id);
    return 0;
}

static int Results_clear(Results *r) {
    Py_CLEAR(r->fallback);
    Py_CLEAR(r->result);
    Py_CLEAR(r->next_id);
    return 0;
}

static void Results_dealloc(Results *r) {
    PyObject_GC_UnTrack(r);
    Results_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMemberDef Results_members[] = {
    {"fallback", T_OBJECT, offsetof(Results, fallback), READONLY, "the Python _results this computes"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Results, vectorcall), READONLY},
    {NULL}};

static PyTypeObject Results_T = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gputape._native.Results",
    .tp_basicsize = sizeof(Results),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Results(_results, _result, _next_const_id): tape._results(grads, flat_s, unconnected, diff) in C.",
    .tp_new = Results_new,
    .tp_dealloc = (destructor)Results_dealloc,
    .tp_traverse = (traverseproc)Results_traverse,
    .tp_clear = (inquiry)Results_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Results, vectorcall),
    .tp_members = Results_members,
};

/* ---- GradientTape.__enter__ / __exit__ (scope()) ------------------------------------------
 *
 * gputape._state.Scope's push and pop for a tape of exactly GradientTape's class (a subclass: the
 * Python methods, which stay the reference and GPUTAPE_NATIVE=0's path). The same steps in the
 * same order: enter checks re-entry, starts a recording (_fresh, Python, before anything is pushed),
 * adds the tape to tape._live_tapes, builds the snapshot, stores _undo, marks the thread (_mark) and
 * commits with one store of tls.obs; exit puts back the snapshot below when the stack is still the
 * one this entry made (else removes the tape by identity, retried once if the removal failed), then
 * _sync and _undo = None. CPython raises a KeyboardInterrupt only at the bytecode loop's eval-breaker
 * checks; no Python code runs after enter's commit or before exit's, so no signal lands between the
 * `with` statement's call and the commit and no SIGINT guard is installed (see _state.Scope). */

static PyTypeObject *sc_tape_T, *sc_obs_T;
static PyObject *sc_tls, *sc_state, *sc_live, *sc_py_enter, *sc_py_exit;
static PyObject *s_undo, *s_used, *s_fresh, *s_observing, *s_stack, *s_add;
/* Observers' slots: debug hooks locations numerics paused placement stack tapes trace watchers */
static Py_ssize_t sc_off[10], sc_off_refs, sc_off_bound;
enum { O_DEBUG, O_HOOKS, O_LOCATIONS, O_NUMERICS, O_PAUSED, O_PLACEMENT, O_STACK, O_TAPES, O_TRACE, O_WATCHERS };

/* Observers((tape,)) as its __init__'s one-tape case makes it (no Python code runs). */
static PyObject *sc_one_tape(PyObject *stack) {
    PyObject *o = sc_obs_T->tp_alloc(sc_obs_T, 0);
    if (o == NULL)
        return NULL;
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) {
        Py_DECREF(o);
        return NULL;
    }
    put(o, sc_off[O_STACK], Py_NewRef(stack));
    put(o, sc_off[O_TAPES], Py_NewRef(stack));
    put(o, sc_off[O_PAUSED], Py_NewRef(empty));
    put(o, sc_off[O_WATCHERS], empty);
    put(o, sc_off[O_TRACE], Py_NewRef(Py_None));
    put(o, sc_off[O_NUMERICS], Py_NewRef(Py_None));
    put(o, sc_off[O_PLACEMENT], Py_NewRef(Py_None));
    put(o, sc_off[O_LOCATIONS], Py_NewRef(Py_False));
    put(o, sc_off[O_DEBUG], Py_NewRef(Py_False));
    put(o, sc_off[O_HOOKS], Py_NewRef(Py_False));
    return o;
}

/* An Observers' stack (new reference), or NULL with an error set. */
static PyObject *sc_stack_of(PyObject *obs) {
    if (Py_IS_TYPE(obs, sc_obs_T)) {
        PyObject *st = SLOT(obs, sc_off[O_STACK]);
        if (st != NULL)
            return Py_NewRef(st);
    }
    return PyObject_GetAttr(obs, s_stack);
}

/* _state._sync(): forget this thread when its stack is empty, and recompute ``anywhere``. */
static int sc_sync(void) {
    PyObject *obs = PyObject_GetAttr(sc_tls, s_obs);
    if (obs == NULL)
        return -1;
    int rc = 0;
    if (obs == Py_None) {
        PyObject *observing = PyDict_GetItemWithError(sc_state, s_observing);
        PyObject *profiler = observing ? PyDict_GetItemWithError(sc_state, s_profiler) : NULL;
        PyObject *ident = profiler ? PyLong_FromUnsignedLong(PyThread_get_thread_ident()) : NULL;
        if (ident == NULL || PySet_Discard(observing, ident) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "gputape._native: gputape._state lost _observing or profiler");
            rc = -1;
        } else {
            PyObject *any = (PySet_GET_SIZE(observing) > 0 || profiler != Py_None) ? Py_True : Py_False;
            rc = PyDict_SetItem(sc_state, s_anywhere, any);
        }
        Py_XDECREF(ident);
    }
    Py_DECREF(obs);
    return rc;
}

/* tape._live_tapes.add(tape): the store here; the pruning (a dict past its bound) in Python. */
static int sc_live_add(PyObject *tape) {
    PyObject *refs = SLOT(sc_live, sc_off_refs), *bound = SLOT(sc_live, sc_off_bound);
    if (refs == NULL || bound == NULL || !PyDict_CheckExact(refs) || !PyLong_CheckExact(bound))
        goto python;
    PyObject *key = PyLong_FromVoidPtr(tape);
    PyObject *ref = key ? PyWeakref_NewRef(tape, NULL) : NULL;
    int rc = ref ? PyDict_SetItem(refs, key, ref) : -1;
    Py_XDECREF(key);
    Py_XDECREF(ref);
    if (rc < 0)
        return -1;
    Py_ssize_t b = PyLong_AsSsize_t(bound);
    if (b == -1 && PyErr_Occurred())
        return -1;
    if (PyDict_GET_SIZE(refs) <= b)
        return 0;
python:;
    PyObject *r = PyObject_CallMethodOneArg(sc_live, s_add, tape);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static PyObject *sc_enter(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (Py_TYPE(self) != sc_tape_T)
        return PyObject_CallOneArg(sc_py_enter, self);
    PyObject *below = PyObject_GetAttr(sc_tls, s_obs);
    if (below == NULL)
        return NULL;
    PyObject *stack = below == Py_None ? PyTuple_New(0) : sc_stack_of(below);
    int in = stack == NULL ? -1 : PySequence_Contains(stack, self);
    Py_DECREF(below);
    if (in != 0) {
        if (in > 0)
            PyErr_SetString(PyExc_ValueError,
                            "Tape is still recording. This can happen if you try to re-enter an already-active tape.");
        Py_XDECREF(stack);
        return NULL;
    }
    Py_DECREF(stack);
    PyObject *tensors = PyObject_GetAttr(self, s_tensors);
    if (tensors == NULL)
        return NULL;
    Py_DECREF(tensors);
    if (tensors == Py_None) { /* (a borrowed identity test: None is immortal in effect) */
        PyObject *r = PyObject_CallMethodNoArgs(self, s_fresh);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        if (PyObject_SetAttr(self, s_used, Py_False) < 0)
            return NULL;
    }
    if (sc_live_add(self) < 0)
        return NULL;
    /* the push (Scope.__enter__): read the stack again, as the Python path does after _fresh */
    if ((below = PyObject_GetAttr(sc_tls, s_obs)) == NULL)
        return NULL;
    PyObject *above = NULL, *undo = NULL, *ident = NULL, *observing;
    if (below == Py_None) {
        stack = PyTuple_Pack(1, self);
        above = stack ? sc_one_tape(stack) : NULL;
    } else {
        PyObject *st = sc_stack_of(below), *one = st ? PyTuple_Pack(1, self) : NULL;
        stack = one ? PySequence_Concat(st, one) : NULL;
        Py_XDECREF(st);
        Py_XDECREF(one);
        above = stack ? PyObject_CallOneArg((PyObject *)sc_obs_T, stack) : NULL;
    }
    Py_XDECREF(stack);
    if (above == NULL || (undo = PyTuple_Pack(2, above, below)) == NULL || PyObject_SetAttr(self, s_undo, undo) < 0)
        goto fail;
    /* _mark() */
    if ((observing = PyDict_GetItemWithError(sc_state, s_observing)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "gputape._native: gputape._state lost _observing");
        goto fail;
    }
    if ((ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident())) == NULL || PySet_Add(observing, ident) < 0 ||
        PyDict_SetItem(sc_state, s_anywhere, Py_True) < 0)
        goto fail;
    if (PyObject_SetAttr(sc_tls, s_obs, above) < 0) /* the commit, last */
        goto fail;
    Py_DECREF(ident);
    Py_DECREF(undo);
    Py_DECREF(above);
    Py_DECREF(below);
    return Py_NewRef(self);
fail:
    Py_XDECREF(ident);
    Py_XDECREF(undo);
    Py_XDECREF(above);
    Py_DECREF(below);
    return NULL;
}

/* _state._without(tape): remove the tape's latest entry by identity, then _sync. */
static int sc_without(PyObject *self) {
    PyObject *obs = PyObject_GetAttr(sc_tls, s_obs);
    if (obs == NULL)
        return -1;
    int rc = 0;
    if (obs != Py_None) {
        PyObject *st = sc_stack_of(obs);
        if (st == NULL || !PyTuple_Check(st)) {
            if (st != NULL)
                PyErr_SetString(PyExc_TypeError, "gputape._native: an Observers stack that is not a tuple");
            rc = -1;
        } else {
            for (Py_ssize_t k = PyTuple_GET_SIZE(st) - 1; k >= 0; k--) {
                if (PyTuple_GET_ITEM(st, k) != self)
                    continue;
                PyObject *a = PyTuple_GetSlice(st, 0, k), *b = a ? PyTuple_GetSlice(st, k + 1, PY_SSIZE_T_MAX) : NULL;
                PyObject *rest = b ? PySequence_Concat(a, b) : NULL;
                PyObject *new = rest == NULL                ? NULL
                                : PyTuple_GET_SIZE(rest) == 0 ? Py_NewRef(Py_None)
                                                              : PyObject_CallOneArg((PyObject *)sc_obs_T, rest);
                rc = new == NULL ? -1 : PyObject_SetAttr(sc_tls, s_obs, new);
                Py_XDECREF(a);
                Py_XDECREF(b);
                Py_XDECREF(rest);
                Py_XDECREF(new);
                break;
            }
        }
        Py_XDECREF(st);
    }
    Py_DECREF(obs);
    return rc < 0 ? -1 : sc_sync();
}

static PyObject *sc_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (Py_TYPE(self) != sc_tape_T) {
        PyObject *all = PyTuple_New(nargs + 1);
        if (all == NULL)
            return NULL;
        PyTuple_SET_ITEM(all, 0, Py_NewRef(self));
        for (Py_ssize_t k = 0; k < nargs; k++)
            PyTuple_SET_ITEM(all, k + 1, Py_NewRef(args[k]));
        PyObject *r = PyObject_Call(sc_py_exit, all, NULL);
        Py_DECREF(all);
        return r;
    }
    PyObject *undo = PyObject_GetAttr(self, s_undo);
    if (undo == NULL)
        return NULL;
    PyObject *obs = PyObject_GetAttr(sc_tls, s_obs);
    if (obs == NULL) {
        Py_DECREF(undo);
        return NULL;
    }
    int rc;
    if (PyTuple_CheckExact(undo) && PyTuple_GET_SIZE(undo) == 2 && PyTuple_GET_ITEM(undo, 0) == obs) {
        rc = PyObject_SetAttr(sc_tls, s_obs, PyTuple_GET_ITEM(undo, 1)); /* the commit: the snapshot below */
        rc = rc < 0 ? -1 : sc_sync();
    } else if ((rc = sc_without(self)) < 0) {
        /* as _state.pop: a removal cut short (an interrupt in Observers' __init__) is made again */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (sc_without(self) < 0)
            _PyErr_ChainExceptions(t, v, tb);
        else
            PyErr_Restore(t, v, tb);
    }
    Py_DECREF(obs);
    Py_DECREF(undo);
    if (rc < 0 || PyObject_SetAttr(self, s_undo, Py_None) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef sc_enter_def = {"__enter__", (PyCFunction)sc_enter, METH_NOARGS,
                                   "Start recording: push this tape on the thread's observer stack (one store)."};
static PyMethodDef sc_exit_def = {"__exit__", (PyCFunction)(void (*)(void))sc_exit, METH_FASTCALL,
                                  "Stop recording: take this tape off the thread's observer stack (one store)."};

static PyObject *scope(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *tape, *state, *live;
    if (!PyArg_ParseTuple(args, "O!O!O:scope", &PyType_Type, &tape, &PyModule_Type, &state, &live))
        return NULL;
    PyObject *sd = PyModule_GetDict(state), *obs_t = PyDict_GetItemString(sd, "Observers");
    PyObject *tls = PyDict_GetItemString(sd, "tls"), *hooks = PyObject_GetAttrString(tape, "_hooks");
    if (hooks == NULL)
        return NULL;
    int bad = obs_t == NULL || !PyType_Check(obs_t) || tls == NULL || hooks != Py_False;
    Py_DECREF(hooks);
    if (bad) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.scope: pass GradientTape (no _opening/_closed hooks), "
                                         "gputape._state and gputape.tape._live_tapes");
        return NULL;
    }
    const char *names[10] = {"debug", "hooks", "locations", "numerics", "paused",
                             "placement", "stack", "tapes", "trace", "watchers"};
    Py_ssize_t off[10];
    for (int k = 0; k < 10; k++)
        if ((off[k] = slot_offset((PyTypeObject *)obs_t, names[k])) < 0)
            return NULL;
    Py_ssize_t refs = slot_offset(Py_TYPE(live), "_refs"), bound = refs < 0 ? -1 : slot_offset(Py_TYPE(live), "_bound");
    if (bound < 0)
        return NULL;
    PyObject *py_enter = PyDict_GetItemString(((PyTypeObject *)tape)->tp_dict, "__enter__");
    PyObject *py_exit = PyObject_GetAttrString(tape, "__exit__");
    if (py_exit == NULL)
        return NULL;
    if (py_enter == NULL || !PyFunction_Check(py_enter) || !PyFunction_Check(py_exit)) {
        Py_DECREF(py_exit);
        PyErr_SetString(PyExc_TypeError, "gputape._native.scope: GradientTape's __enter__/__exit__ are not the "
                                         "Python ones (scope() ran twice?)");
        return NULL;
    }
    if (s_undo == NULL) {
        struct {
            PyObject **p;
            const char *s;
        } nm[] = {{&s_undo, "_undo"}, {&s_used, "_used"},   {&s_fresh, "_fresh"},
                  {&s_observing, "_observing"}, {&s_stack, "stack"}, {&s_add, "add"}};
        for (size_t k = 0; k < sizeof(nm) / sizeof(nm[0]); k++)
            if ((*nm[k].p = PyUnicode_InternFromString(nm[k].s)) == NULL) {
                Py_DECREF(py_exit);
                return NULL;
            }
    }
    PyObject *enter = PyDescr_NewMethod((PyTypeObject *)tape, &sc_enter_def);
    PyObject *exit = enter ? PyDescr_NewMethod((PyTypeObject *)tape, &sc_exit_def) : NULL;
    PyObject *pair = exit ? PyTuple_Pack(2, enter, exit) : NULL;
    Py_XDECREF(enter);
    Py_XDECREF(exit);
    if (pair == NULL) {
        Py_DECREF(py_exit);
        return NULL;
    }
    memcpy(sc_off, off, sizeof(off));
    sc_off_refs = refs, sc_off_bound = bound;
    Py_XSETREF(sc_tape_T, (PyTypeObject *)Py_NewRef(tape));
    Py_XSETREF(sc_obs_T, (PyTypeObject *)Py_NewRef(obs_t));
    Py_XSETREF(sc_tls, Py_NewRef(tls));
    Py_XSETREF(sc_state, Py_NewRef(sd));
    Py_XSETREF(sc_live, Py_NewRef(live));
    Py_XSETREF(sc_py_enter, Py_NewRef(py_enter));
    Py_XSETREF(sc_py_exit, py_exit);
    return pair;
}

/* ---- plain SGD's step (gputape._optim_base: _plain_pairs and Optimizer._step_plain) ---------- */

/* Whether host arrays a and b (IS_DIRECT) have one shape and dtype (-1: an error). */
static int same_array_kind(PyObject *a, PyObject *b) {
    const ArrayHead *x = (const ArrayHead *)a, *y = (const ArrayHead *)b;
    if (x->nd != y->nd)
        return 0;
    for (int k = 0; k < x->nd; k++)
        if (x->dimensions[k] != y->dimensions[k])
            return 0;
    return x->descr == y->descr ? 1 : PyObject_RichCompareBool(x->descr, y->descr, Py_EQ);
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (PyObject *const *)a, y = (uintptr_t) * (PyObject *const *)b;
    return (x > y) - (x < y);
}

/* plain_pairs(pairs): _optim_base._plain_pairs for pairs of exact Tensors/Variables and host arrays. */
static PyObject *plain_pairs(PyObject *Py_UNUSED(self), PyObject *pairs) {
    if (!ready || !direct_arrays || !PyList_CheckExact(pairs))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PyList_GET_SIZE(pairs);
    if (n == 0)
        Py_RETURN_NONE;
    PyObject *raw = PyList_New(n), *vars = PyList_New(n), *out = NULL;
    PyObject **sorted = PyMem_Malloc(n * sizeof(PyObject *));
    if (raw == NULL || vars == NULL || sorted == NULL) {
        if (sorted == NULL)
            PyErr_NoMemory();
        goto done;
    }
    int refused = 0; /* 1: not plain (None); 2: not for this twin (NotImplemented, the Python one judges) */
    for (Py_ssize_t k = 0; k < n && !refused; k++) {
        PyObject *pair = PyList_GET_ITEM(pairs, k);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            refused = 1;
            break;
        }
        PyObject *g = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        if (!Py_IS_TYPE(v, Variable_T) || !(Py_IS_TYPE(g, Tensor_T) || Py_IS_TYPE(g, Variable_T))) {
            refused = 2; /* (a subclass, or not a tensor: isinstance, and any _data of its own, are Python's) */
            break;
        }
        PyObject *a = SLOT(g, off_t_data), *d = SLOT(v, off_t_data);
        if (a == NULL || d == NULL || !IS_DIRECT(a) || !IS_DIRECT(d)) {
            refused = a == NULL || d == NULL ? 2 : 1;
            break;
        }
        int same = same_array_kind(a, d);
        if (same < 0)
            goto done;
        refused = !same;
        PyList_SET_ITEM(raw, k, Py_NewRef(a));
        PyList_SET_ITEM(vars, k, Py_NewRef(v));
        sorted[k] = v;
    }
    if (refused) {
        out = refused == 1 ? Py_NewRef(Py_None) : Py_NewRef(Py_NotImplemented);
        goto done;
    }
    /* each variable once (the Python twin: a set of ids) */
    qsort(sorted, (size_t)n, sizeof(PyObject *), by_address);
    for (Py_ssize_t k = 1; k < n; k++)
        if (sorted[k] == sorted[k - 1]) {
            out = Py_NewRef(Py_None);
            goto done;
        }
    out = PyTuple_Pack(2, raw, vars);
done:
    PyMem_Free(sorted);
    Py_XDECREF(raw); /* (unfilled items are NULL: list_dealloc skips them) */
    Py_XDECREF(vars);
    return out;
}

/* plain_sgd_step(raw, variables, owned, lr, rate, multiply, subtract, empty_like, counter, count):
 * Optimizer._step_plain's two phases, the Python form's operations in its order.
 *
 * Phase 1 computes every ``g * rate(g, lr)`` (``multiply(g, t, g)`` for a donated gradient) and,
 * for a variable whose array something else holds, the new array copy-on-write writes into; it
 * changes nothing, so an error or a KeyboardInterrupt there (Python code runs: the rate function,
 * numpy's floating-point warnings) leaves the state as it was.
 *
 * Phase 2 is ``subtract(w, delta, w)`` per variable (into the new array for a shared one, which
 * is then stored), then the count. It needs no defer_interrupts: CPython runs a Python signal
 * handler only from the eval loop between bytecodes or where C code calls PyErr_CheckSignals; the C
 * handler just sets a flag. This loop runs no bytecode: numpy's ufunc loops do not check signals;
 * the cyclic collector (which can run __del__ methods) is off; the old arrays are released after
 * the last store (a release can run weakref callbacks). The one Python code numpy can run there is
 * its floating-point error handling (a warning shown, an np.seterrcall function), after it wrote
 * the result; a KeyboardInterrupt raised in it is held, as defer_interrupts holds one, and raised
 * when the commit is done. So a Ctrl-C during phase 2 is raised after the whole step. Any other
 * error there (np.seterr(all="raise")) stops the commit where it is, as the Python form's does.
 * Another thread may run while a ufunc has released the GIL, as it may between the Python form's
 * bytecodes; what it does to these variables then is not ordered with the step in either form.
 * Returns True; False (nothing done) where a variable is not an exact Variable or the count's
 * holder not one: the Python form takes those. */
static PyObject *plain_sgd_step(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.plain_sgd_step takes 10 arguments");
        return NULL;
    }
    PyObject *raw = args[0], *vars = args[1], *owned = args[2], *lr = args[3], *rate = args[4];
    PyObject *multiply = args[5], *subtract = args[6], *empty_like = args[7], *counter = args[8], *count = args[9];
#ifdef Py_GIL_DISABLED
    Py_RETURN_FALSE; /* (reference counts there are split or deferred: exclusivity is not Py_REFCNT == 1) */
#endif
    if (!ready || !PyList_CheckExact(raw) || !PyList_CheckExact(vars) ||
        PyList_GET_SIZE(raw) != PyList_GET_SIZE(vars) || !Py_IS_TYPE(counter, Variable_T) ||
        (owned != Py_None && (!PyList_CheckExact(owned) || PyList_GET_SIZE(owned) != PyList_GET_SIZE(raw))))
        Py_RETURN_FALSE;
    Py_ssize_t n = PyList_GET_SIZE(raw);
    for (Py_ssize_t k = 0; k < n; k++)
        if (!Py_IS_TYPE(PyList_GET_ITEM(vars, k), Variable_T) || SLOT(PyList_GET_ITEM(vars, k), off_t_data) == NULL)
            Py_RETURN_FALSE;
    /* [0, n): the gradients (held: a list item may go), [n, 2n): deltas, [2n, 3n): copy-on-write
     * arrays, [3n, 4n): the old arrays phase 2 replaces */
    PyObject **h = PyMem_Calloc(4 * (size_t)n + 1, sizeof(PyObject *));
    if (h == NULL)
        return PyErr_NoMemory();
    PyObject *ret = NULL, *dt = NULL, *t = NULL;
    for (Py_ssize_t k = 0; k < n; k++)
        h[k] = Py_NewRef(PyList_GET_ITEM(raw, k));
    PyObject **vs = PyMem_Malloc((size_t)n * sizeof(PyObject *) + 1);
    if (vs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        vs[k] = Py_NewRef(PyList_GET_ITEM(vars, k));
    /* phase 1 */
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *g = h[k], *gdt = dtype_of(g);
        if (gdt == NULL)
            goto fail;
        if (gdt != dt) { /* (plain_sgd: the rate again where the dtype is not the last one) */
            Py_XSETREF(dt, gdt);
            PyObject *a2[2] = {g, lr};
            Py_XSETREF(t, PyObject_Vectorcall(rate, a2, 2, NULL));
            if (t == NULL)
                goto fail;
        } else
            Py_DECREF(gdt);
        int into = 0;
        if (owned != Py_None && (into = PyObject_IsTrue(PyList_GET_ITEM(owned, k))) < 0)
            goto fail;
        if (into) {
            PyObject *a3[3] = {g, t, g};
            h[n + k] = PyObject_Vectorcall(multiply, a3, 3, NULL);
        } else
            h[n + k] = PyNumber_Multiply(g, t);
        if (h[n + k] == NULL)
            goto fail;
        PyObject *w = SLOT(vs[k], off_t_data);
        if (Py_REFCNT(w) > 1) { /* (only the variable holds it: _EXCLUSIVE_REFS' test, without the call's refs) */
            PyObject *a1[1] = {w};
            if ((h[2 * n + k] = PyObject_Vectorcall(empty_like, a1, 1, NULL)) == NULL)
                goto fail;
        }
    }
    /* phase 2 */
    {
        int gc = PyGC_Disable();
        PyObject *held_t = NULL, *held_v = NULL, *held_tb = NULL;
        int held_ki = 0;
        Py_ssize_t k = 0;
        for (; k < n; k++) {
            PyObject *w = SLOT(vs[k], off_t_data);
            PyObject *into = w;
            if (Py_REFCNT(w) > 1) {
                into = h[2 * n + k];
                if (into == NULL) { /* (shared since phase 1: another thread took it) */
                    PyObject *a1[1] = {w};
                    if ((into = h[2 * n + k] = PyObject_Vectorcall(empty_like, a1, 1, NULL)) == NULL)
                        break;
                }
            }
            PyObject *a3[3] = {w, h[n + k], into};
            PyObject *r = PyObject_Vectorcall(subtract, a3, 3, NULL);
            if (r == NULL) {
                /* numpy raises these after it wrote the result: a Ctrl-C from Python code its error
                 * handling ran, its floating-point report (np.seterr "raise", a RuntimeWarning made an
                 * error). Held, and the commit goes on: the first Ctrl-C wins over a report (as
                 * defer_interrupts delivers one at the end of Python's commit), else the first report */
                int ki = PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
                if (!ki && !PyErr_ExceptionMatches(PyExc_FloatingPointError) &&
                    !PyErr_ExceptionMatches(PyExc_Warning))
                    break;
                if (held_t == NULL || (ki && !held_ki)) {
                    Py_XDECREF(held_t);
                    Py_XDECREF(held_v);
                    Py_XDECREF(held_tb);
                    PyErr_Fetch(&held_t, &held_v, &held_tb);
                    held_ki = ki;
                } else
                    PyErr_Clear();
            }
            Py_XDECREF(r);
            if (into != w) {
                h[3 * n + k] = w; /* (the variable's reference, released below) */
                SLOT(vs[k], off_t_data) = Py_NewRef(into);
            }
        }
        int whole = k == n;
        PyObject *old = NULL;
        if (whole) {
            old = SLOT(counter, off_t_data);
            SLOT(counter, off_t_data) = Py_NewRef(count);
        }
        if (gc)
            PyGC_Enable();
        Py_XDECREF(old);
        if (held_t != NULL) {
            if (whole)
                PyErr_Restore(held_t, held_v, held_tb);
            else { /* (the error that stopped it is raised; the held interrupt is its context) */
                PyObject *et, *ev, *etb;
                PyErr_Fetch(&et, &ev, &etb);
                PyErr_NormalizeException(&et, &ev, &etb);
                PyErr_NormalizeException(&held_t, &held_v, &held_tb);
                if (held_tb != NULL)
                    PyException_SetTraceback(held_v, held_tb);
                Py_XDECREF(held_t);
                Py_XDECREF(held_tb);
                PyException_SetContext(ev, held_v);
                PyErr_Restore(et, ev, etb);
            }
        } else if (whole)
            ret = Py_NewRef(Py_True);
    }
fail:
    for (Py_ssize_t k = 0; k < n; k++)
        Py_DECREF(vs[k]);
done:
    PyMem_Free(vs);
    for (Py_ssize_t k = 0; k < 4 * n; k++)
        Py_XDECREF(h[k]);
    PyMem_Free(h);
    Py_XDECREF(dt);
    Py_XDECREF(t);
    return ret;
}

/* ---- the module --------------------------------------------------------------------------- */

static PyObject *watching(PyObject *Py_UNUSED(self), PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "gputape._native.watching: pass the GradientTape class");
        return NULL;
    }
    Py_XSETREF(Tape_T, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(Tensor, Node, Observers, Primitive, NOPARAMS, NOSAVED, floats, ndarray, Literal): the classes and "
     "shared objects used."},
    {"watching", watching, METH_O,
     "watching(GradientTape): the recorders watch a trainable Variable read under a tape of exactly this class "
     "as GradientTape._watch_variable does (any other tape: the Python recorder)."},
    {"scope", scope, METH_VARARGS,
     "scope(GradientTape, gputape._state, _live_tapes): GradientTape's __enter__ and __exit__ done here (a tape of "
     "exactly this class; any other: the Python methods)."},
    {"plain_pairs", plain_pairs, METH_O, "plain_pairs(pairs): gputape._optim_base._plain_pairs' C twin."},
    {"plain_sgd_step", (PyCFunction)(void (*)(void))plain_sgd_step, METH_FASTCALL,
     "plain_sgd_step(raw, variables, owned, lr, rate, multiply, subtract, empty_like, counter, count): "
     "Optimizer._step_plain's C twin."},
    {NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "gputape._native", "gputape's optional C accelerator (see gputape/_native.c).", -1,
    methods};

PyMODINIT_FUNC PyInit__native(void) {
    struct {
        PyObject **p;
        const char *s;
    } names[] = {{&s_dtype, "dtype"},
                 {&s_shape, "shape"},
                 {&s_tensors, "_tensors"},
                 {&s_nodes, "_nodes"},
                 {&s_leaves, "_leaves"},
                 {&s_auto, "_auto"},
                 {&s_watched_vars, "_watched_vars"},
                 {&s_persistent, "_persistent"},
                 {&s_vjp, "vjp"},
                 {&s_MAX_NODES, "MAX_NODES"},
                 {&s_Node, "Node"},
                 {&s_seeds, "seeds"},
                 {&s_sources, "sources"},
                 {&s_already_swept, "already_swept"},
                 {&s_too_many_nodes, "too_many_nodes"},
                 {&s_no_source_recorded, "no_source_recorded"},
                 {&s_anywhere, "anywhere"},
                 {&s_profiler, "profiler"},
                 {&s_obs, "obs"},
                 {&s_qualname, "__qualname__"},
                 {&s_LITERALS, "LITERALS"},
                 {&s_cpu, "cpu"},
                 {&s_fwd, "fwd"},
                 {&s_same_op, "same_op"}};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k].p = PyUnicode_InternFromString(names[k].s)) == NULL)
            return NULL;
    if (PyType_Ready(&Recorder_T) < 0 || PyType_Ready(&Structure_T) < 0 || PyType_Ready(&Entry_T) < 0 ||
        PyType_Ready(&Raise_T) < 0 || PyType_Ready(&Swapped_T) < 0 || PyType_Ready(&Results_T) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "API", API_VERSION) < 0 ||
        PyModule_AddObjectRef(m, "Recorder", (PyObject *)&Recorder_T) < 0 ||
        PyModule_AddObjectRef(m, "Structure", (PyObject *)&Structure_T) < 0 ||
        PyModule_AddObjectRef(m, "Entry", (PyObject *)&Entry_T) < 0 ||
        PyModule_AddObjectRef(m, "Swapped", (PyObject *)&Swapped_T) < 0 ||
        PyModule_AddObjectRef(m, "Results", (PyObject *)&Results_T) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
