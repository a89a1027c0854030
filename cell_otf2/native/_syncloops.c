/* Per-record loops of ordering and synchronization in C: `block_pairs` finds the
 * two block constraints of order.py (a record read on another clock than its block's header;
 * a block's first record after the previous block's header) in one sweep over the record
 * table, where numpy needed a gather and a dozen strided passes over every record for
 * constraints that most runs do not have; `settle` gives one location's records their times
 * from their reference readings (synchronize.apply_times: rounding, the no-decrease rule,
 * records without a clock, what is unusable), in two sweeps instead of numpy's fifteen;
 * `reversed_count` counts the matched pairs written in reverse order.
 *
 * Built by setuptools at install time (setup.py, optional); cell_otf2/native/sync_loops.py
 * takes its numpy twins, with the same results, where native.helper does not give it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline int64_t i64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline int32_t i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline uint32_t u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* block_pairs(rec, itemsize, loc_off, code_off, domain_off, local_off, anchor_off,
 *             anc, anc_itemsize, anc_domain_off, anc_local_off)
 * -> (src1, dst1, w1, src2, dst2, w2), bytes of int64, int64, float64 each:
 * 1. every record whose domain and its header's domain are both >= 0 and differ:
 *    (header's domain, record's domain, header's local - record's local);
 * 2. every record i >= 1 on the location of record i - 1, with another anchor than it and an
 *    SPE code (code >> 8 == 2), whose domain and the previous record's header's domain are
 *    both >= 0 and differ: (record's domain, that header's domain, record's local - that
 *    header's local). Locals are converted to double before subtracting, as numpy does.
 * A negative anchor index counts from the end, as numpy's indexing does. */
static PyObject *block_pairs(PyObject *self, PyObject *args)
{
    Py_buffer rec, anc;
    Py_ssize_t item, loc_off, code_off, dom_off, local_off, anchor_off;
    Py_ssize_t anc_item, anc_dom_off, anc_local_off;
    if (!PyArg_ParseTuple(args, "y*nnnnnny*nnn", &rec, &item, &loc_off, &code_off, &dom_off,
                          &local_off, &anchor_off, &anc, &anc_item, &anc_dom_off,
                          &anc_local_off))
        return NULL;
    PyObject *result = NULL;
    PyObject *out[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t n = item > 0 ? rec.len / item : 0;
    Py_ssize_t n_anc = anc_item > 0 ? anc.len / anc_item : 0;
    if (item <= 0 || anc_item <= 0 || loc_off < 0 || loc_off + 4 > item || code_off < 0
        || code_off + 2 > item || dom_off < 0 || dom_off + 4 > item || local_off < 0
        || local_off + 8 > item || anchor_off < 0 || anchor_off + 8 > item || anc_dom_off < 0
        || anc_dom_off + 4 > anc_item || anc_local_off < 0 || anc_local_off + 8 > anc_item) {
        PyErr_SetString(PyExc_ValueError, "block_pairs: bad layout");
        goto done;
    }
    const unsigned char *r = (const unsigned char *)rec.buf;
    const unsigned char *a = (const unsigned char *)anc.buf;
    /* two sweeps: count, then fill */
    Py_ssize_t count[2] = {0, 0};
    for (int fill = 0; fill < 2; fill++) {
        int64_t *src1 = NULL, *dst1 = NULL, *src2 = NULL, *dst2 = NULL;
        double *w1 = NULL, *w2 = NULL;
        if (fill) {
            for (int k = 0; k < 2; k++) {
                for (int j = 0; j < 3; j++) {
                    out[3 * k + j] = PyBytes_FromStringAndSize(NULL, count[k] * 8);
                    if (out[3 * k + j] == NULL)
                        goto done;
                }
            }
            src1 = (int64_t *)PyBytes_AS_STRING(out[0]);
            dst1 = (int64_t *)PyBytes_AS_STRING(out[1]);
            w1 = (double *)PyBytes_AS_STRING(out[2]);
            src2 = (int64_t *)PyBytes_AS_STRING(out[3]);
            dst2 = (int64_t *)PyBytes_AS_STRING(out[4]);
            w2 = (double *)PyBytes_AS_STRING(out[5]);
        }
        Py_ssize_t k1 = 0, k2 = 0;
        int64_t prev_anchor = 0;
        uint32_t prev_loc = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const unsigned char *row = r + i * item;
            int64_t anchor = i64(row + anchor_off);
            int64_t at = anchor < 0 ? anchor + n_anc : anchor;
            if (at < 0 || at >= n_anc) {
                PyErr_Format(PyExc_IndexError, "block_pairs: anchor %lld of record %zd out of "
                             "range", (long long)anchor, i);
                goto done;
            }
            int32_t dom = i32(row + dom_off);
            int64_t local = i64(row + local_off);
            int32_t head = i32(a + at * anc_item + anc_dom_off);
            if (dom >= 0 && head >= 0 && dom != head) {
                if (fill) {
                    src1[k1] = head;
                    dst1[k1] = dom;
                    w1[k1] = (double)i64(a + at * anc_item + anc_local_off) - (double)local;
                }
                k1++;
            }
            uint32_t loc = u32(row + loc_off);
            if (i > 0 && loc == prev_loc && anchor != prev_anchor
                && (u16(row + code_off) >> 8) == 2) {
                int64_t pa = prev_anchor < 0 ? prev_anchor + n_anc : prev_anchor;
                int32_t prev_head = i32(a + pa * anc_item + anc_dom_off);
                if (prev_head >= 0 && dom >= 0 && prev_head != dom) {
                    if (fill) {
                        src2[k2] = dom;
                        dst2[k2] = prev_head;
                        w2[k2] = (double)local - (double)i64(a + pa * anc_item + anc_local_off);
                    }
                    k2++;
                }
            }
            prev_anchor = anchor;
            prev_loc = loc;
        }
        count[0] = k1;
        count[1] = k2;
    }
    result = PyTuple_New(6);
    if (result == NULL)
        goto done;
    for (int j = 0; j < 6; j++) {
        PyTuple_SET_ITEM(result, j, out[j]);
        out[j] = NULL;
    }
done:
    for (int j = 0; j < 6; j++)
        Py_XDECREF(out[j]);
    PyBuffer_Release(&rec);
    PyBuffer_Release(&anc);
    return result;
}

typedef struct {
    long long violations, clamped, unbounded, lost;
    Py_ssize_t first_unbounded, first_lost;
} Settled;

/* The core of `settle` and `place`: n records' times from their reference times `x` and
 * whether they read a clock `h`; `first` is scratch of n int64. */
static Settled settle_core(Py_ssize_t n, const double *x, const unsigned char *h,
                           unsigned char *r, Py_ssize_t item, Py_ssize_t time_off,
                           unsigned char *u, int64_t *first)
{
    const int64_t LOW = -((int64_t)1 << 62), HIGH = (int64_t)1 << 62;
    const double TOP = 9223372036854775808.0; /* 2^63 */
    Settled out = {0, 0, 0, 0, -1, -1};
    /* backwards: the least time at or after each record */
    int64_t least = HIGH;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        double v = x[i];
        if (h[i] && !isnan(v) && !(v < 0.0 || v >= TOP)) {
            int64_t t = (int64_t)nearbyint(v);
            if (t < least)
                least = t;
        }
        first[i] = least;
    }
    int64_t run = LOW;
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = x[i];
        int has_clock = h[i] != 0;
        int is_unbounded = has_clock && isnan(v);
        int outside = has_clock && !is_unbounded && (v < 0.0 || v >= TOP);
        int ok = !is_unbounded && !outside;
        int timed = ok && has_clock;
        int64_t seg = timed ? (int64_t)nearbyint(v) : LOW;
        if (seg > run)
            run = seg;
        if (timed && seg < run)
            out.violations++;
        if (ok && !has_clock)
            out.clamped++;
        int64_t t = run < 0 ? first[i] : run;
        ok = ok && t < HIGH;
        memcpy(r + i * item + time_off, ok ? &t : &seg, 8);
        u[i] = (unsigned char)ok;
        if (is_unbounded) {
            if (out.first_unbounded < 0)
                out.first_unbounded = i;
            out.unbounded++;
        } else if (!ok) {
            if (out.first_lost < 0)
                out.first_lost = i;
            out.lost++;
        }
    }
    return out;
}

static PyObject *settled_tuple(Settled s)
{
    return Py_BuildValue("LLLnLn", s.violations, s.clamped, s.unbounded, s.first_unbounded,
                         s.lost, s.first_lost);
}

/* settle(ref, has, rec, itemsize, time_off, usable)
 * -> (violations, clamped, unbounded, first_unbounded, lost, first_lost):
 * one location's records (rows of `rec`), with `ref` their reference times (double, NaN when
 * no constraint bounds them) and `has` whether they read a clock. A time outside 0..2^63 is
 * lost; the others are rounded to the nearest tick (ties to even); a record without a clock,
 * and a record below an earlier one's time, takes the greatest time before it (the first
 * one after it when there is none); a location with no time at all has none. Writes each
 * row's int64 time at `time_off` and `usable` (bytes 0/1); the first_* are indexes within
 * the location or -1. The numpy path in syncloops.py is the specification. */
static PyObject *settle(PyObject *self, PyObject *args)
{
    Py_buffer ref, has, rec, usable;
    Py_ssize_t item, time_off;
    if (!PyArg_ParseTuple(args, "y*y*w*nnw*", &ref, &has, &rec, &item, &time_off, &usable))
        return NULL;
    PyObject *result = NULL;
    int64_t *first = NULL;
    Py_ssize_t n = ref.len / (Py_ssize_t)sizeof(double);
    if (item <= 0 || time_off < 0 || time_off + 8 > item || has.len != n || usable.len != n
        || rec.len < n * item) {
        PyErr_SetString(PyExc_ValueError, "settle: bad sizes");
        goto done;
    }
    first = (int64_t *)PyMem_Malloc((n > 0 ? n : 1) * sizeof(int64_t));
    if (first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    result = settled_tuple(settle_core(n, (const double *)ref.buf,
                                       (const unsigned char *)has.buf,
                                       (unsigned char *)rec.buf, item, time_off,
                                       (unsigned char *)usable.buf, first));
done:
    PyMem_Free(first);
    PyBuffer_Release(&ref);
    PyBuffer_Release(&has);
    PyBuffer_Release(&rec);
    PyBuffer_Release(&usable);
    return result;
}

/* place(rec, itemsize, domain_off, local_off, time_off, dom_offset, dom_node, kind, offset,
 *       rate, knot_start, knots_node, knots_ref, usable) -> as settle:
 * one location's records given their reference times first: a record with domain d >= 0
 * reads node time dom_offset[d + 1] + local on node dom_node[d + 1], which that node's map
 * turns into reference time: kind 0 offset + rate * t, kind 1 the piecewise-linear map of
 * its knots (knot_start[node] .. knot_start[node + 1], at least two; the end pieces extend
 * beyond them) as kr[k] + (t - kn[k]) * ((kr[k+1] - kr[k]) / (kn[k+1] - kn[k])) with k the
 * last knot <= t (clipped to the pieces), exactly as model.NodeMap and
 * nodefit.PiecewiseMap compute it; then settle. The caller checks that every node of a
 * domain has a map. */
static PyObject *place(PyObject *self, PyObject *args)
{
    Py_buffer rec, dom_offset, dom_node, kind, offset, rate, knot_start, kn_buf, kr_buf, usable;
    Py_ssize_t item, dom_off, local_off, time_off;
    if (!PyArg_ParseTuple(args, "w*nnnny*y*y*y*y*y*y*y*w*", &rec, &item, &dom_off, &local_off,
                          &time_off, &dom_offset, &dom_node, &kind, &offset, &rate,
                          &knot_start, &kn_buf, &kr_buf, &usable))
        return NULL;
    PyObject *result = NULL;
    double *ref = NULL;
    unsigned char *has = NULL;
    int64_t *first = NULL;
    Py_ssize_t n = usable.len;
    Py_ssize_t n_dom = dom_offset.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t n_nodes = kind.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n_knots = kn_buf.len / (Py_ssize_t)sizeof(double);
    if (item <= 0 || dom_off < 0 || dom_off + 4 > item || local_off < 0 || local_off + 8 > item
        || time_off < 0 || time_off + 8 > item || rec.len < n * item
        || dom_node.len != n_dom * (Py_ssize_t)sizeof(int64_t)
        || offset.len != n_nodes * (Py_ssize_t)sizeof(double)
        || rate.len != n_nodes * (Py_ssize_t)sizeof(double)
        || knot_start.len != (n_nodes + 1) * (Py_ssize_t)sizeof(int64_t)
        || kr_buf.len != kn_buf.len) {
        PyErr_SetString(PyExc_ValueError, "place: bad sizes");
        goto done;
    }
    const double *doff = (const double *)dom_offset.buf;
    const int64_t *dnode = (const int64_t *)dom_node.buf;
    const int64_t *kinds = (const int64_t *)kind.buf;
    const double *off = (const double *)offset.buf;
    const double *rt = (const double *)rate.buf;
    const int64_t *ks = (const int64_t *)knot_start.buf;
    const double *kn = (const double *)kn_buf.buf;
    const double *kr = (const double *)kr_buf.buf;
    for (Py_ssize_t q = 0; q < n_nodes; q++) {
        if (kinds[q] == 1 && (ks[q] < 0 || ks[q + 1] > n_knots || ks[q + 1] - ks[q] < 2)) {
            PyErr_SetString(PyExc_ValueError, "place: bad knots");
            goto done;
        }
    }
    ref = (double *)PyMem_Malloc((n > 0 ? n : 1) * sizeof(double));
    has = (unsigned char *)PyMem_Malloc(n > 0 ? n : 1);
    first = (int64_t *)PyMem_Malloc((n > 0 ? n : 1) * sizeof(int64_t));
    if (ref == NULL || has == NULL || first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *r = (unsigned char *)rec.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d = (int64_t)i32(r + i * item + dom_off) + 1;
        if (d < 0 || d >= n_dom) {
            PyErr_Format(PyExc_IndexError, "place: domain %lld of record %zd out of range",
                         (long long)d - 1, i);
            goto done;
        }
        has[i] = d > 0;
        ref[i] = NAN;
        if (!has[i])
            continue;
        int64_t q = dnode[d];
        if (q < 0 || q >= n_nodes || kinds[q] < 0) {
            PyErr_Format(PyExc_ValueError, "place: record %zd is on node %lld without a map",
                         i, (long long)q);
            goto done;
        }
        double t = doff[d] + (double)i64(r + i * item + local_off);
        if (kinds[q] == 0) {
            double p = rt[q] * t;
            ref[i] = off[q] + p;
        } else {
            const double *a = kn + ks[q], *b = kr + ks[q];
            Py_ssize_t m = (Py_ssize_t)(ks[q + 1] - ks[q]);
            /* searchsorted(a, t, side="right") - 1, clipped to 0 .. m - 2; NaN sorts last */
            Py_ssize_t lo = 0, hi = m;
            if (isnan(t)) {
                lo = m;
            } else {
                while (lo < hi) {
                    Py_ssize_t mid = (lo + hi) / 2;
                    if (a[mid] <= t) /* false for a NaN knot: it sorts last */
                        lo = mid + 1;
                    else
                        hi = mid;
                }
            }
            Py_ssize_t k = lo - 1;
            if (k < 0)
                k = 0;
            if (k > m - 2)
                k = m - 2;
            double slope = (b[k + 1] - b[k]) / (a[k + 1] - a[k]);
            double p = (t - a[k]) * slope;
            ref[i] = b[k] + p;
        }
    }
    result = settled_tuple(settle_core(n, ref, has, r, item, time_off,
                                       (unsigned char *)usable.buf, first));
done:
    PyMem_Free(ref);
    PyMem_Free(has);
    PyMem_Free(first);
    PyBuffer_Release(&rec);
    PyBuffer_Release(&dom_offset);
    PyBuffer_Release(&dom_node);
    PyBuffer_Release(&kind);
    PyBuffer_Release(&offset);
    PyBuffer_Release(&rate);
    PyBuffer_Release(&knot_start);
    PyBuffer_Release(&kn_buf);
    PyBuffer_Release(&kr_buf);
    PyBuffer_Release(&usable);
    return result;
}

/* reversed_count(rec, itemsize, time_off, usable, pairs, pair_itemsize, first_off, then_off)
 * -> how many rows of `pairs` (int64 record indexes at first_off and then_off; a negative
 * index: no such record, the row skipped) have both records usable (one byte per record) and
 * the second record's time (int64 at time_off) below the first's: the written order
 * violations of synchronize.written_order_violations, in one sweep over the pairs where numpy
 * gathers each column into temporaries of the pairs' size. An index past the table is an
 * IndexError, as numpy's indexing raises. */
static PyObject *reversed_count(PyObject *self, PyObject *args)
{
    Py_buffer rec, usable, pairs;
    Py_ssize_t item, time_off, p_item, first_off, then_off;
    if (!PyArg_ParseTuple(args, "y*nny*y*nnn", &rec, &item, &time_off, &usable, &pairs,
                          &p_item, &first_off, &then_off))
        return NULL;
    PyObject *result = NULL;
    if (item <= 0 || time_off < 0 || time_off + 8 > item || p_item <= 0 || first_off < 0
        || first_off + 8 > p_item || then_off < 0 || then_off + 8 > p_item
        || usable.len != rec.len / item) {
        PyErr_SetString(PyExc_ValueError, "reversed_count: bad layout");
        goto done;
    }
    const unsigned char *r = (const unsigned char *)rec.buf;
    const unsigned char *u = (const unsigned char *)usable.buf;
    const unsigned char *p = (const unsigned char *)pairs.buf;
    Py_ssize_t n = rec.len / item, m = pairs.len / p_item;
    long long count = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t a = i64(p + i * p_item + first_off), b = i64(p + i * p_item + then_off);
        if (a < 0 || b < 0)
            continue;
        if (a >= n || b >= n) {
            PyErr_SetString(PyExc_IndexError, "reversed_count: record index out of range");
            goto done;
        }
        if (u[a] && u[b] && i64(r + b * item + time_off) < i64(r + a * item + time_off))
            count++;
    }
    result = PyLong_FromLongLong(count);
done:
    PyBuffer_Release(&rec);
    PyBuffer_Release(&usable);
    PyBuffer_Release(&pairs);
    return result;
}

static PyMethodDef methods[] = {
    {"block_pairs", block_pairs, METH_VARARGS,
     "block_pairs(rec, itemsize, loc_off, code_off, domain_off, local_off, anchor_off, anc, "
     "anc_itemsize, anc_domain_off, anc_local_off): order.py's two block constraints"},
    {"settle", settle, METH_VARARGS,
     "settle(ref, has, rec, itemsize, time_off, usable): one location's record times"},
    {"place", place, METH_VARARGS,
     "place(rec, itemsize, domain_off, local_off, time_off, dom_offset, dom_node, kind, "
     "offset, rate, knot_start, knots_node, knots_ref, usable): one location's record "
     "times from their clocks"},
    {"reversed_count", reversed_count, METH_VARARGS,
     "reversed_count(rec, itemsize, time_off, usable, pairs, pair_itemsize, first_off, "
     "then_off): the pairs whose usable records are written in reverse order"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_syncloops",
    "Per-record loops of ordering and synchronization (cell_otf2/native/sync_loops.py binds them).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__syncloops(void) { return PyModule_Create(&module); }
