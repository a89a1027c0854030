/* Per-event loops of emit in C: `layout_own` lays the own events out by counting
 * (events per record, then a running fill per record, a block of records at a time),
 * `fill_rows` writes the packed rows of a piece of the table's own events (every byte of each
 * row: location, type, ref, time and seq from its record, parameters from arrays, scalars or
 * bits of its record's fields), `region_walk` finds the locations whose Enter and Leave
 * events do not balance and nest (one stack walk per location, its codes laid into a buffer
 * of that location), `written_span` the records to write and their time span in one pass over
 * the rows, `take_field` gathers a field of chosen records and `select_refs` maps an id field
 * of the records of a code through a table. No Python call per event.
 *
 * Built by setuptools at install time (setup.py, optional); cell_otf2/emit/kernels.py takes
 * its numpy path, with the same results, where native.helper does not give this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int64_t load_index(const void *buf, Py_ssize_t j, int wide)
{
    return wide ? ((const int64_t *)buf)[j] : (int64_t)((const int32_t *)buf)[j];
}

static inline uint64_t load_int(const unsigned char *p, Py_ssize_t size, int sign)
{
    switch (size) {
    case 1: { uint8_t x; memcpy(&x, p, 1); return sign ? (uint64_t)(int64_t)(int8_t)x : x; }
    case 2: { uint16_t x; memcpy(&x, p, 2); return sign ? (uint64_t)(int64_t)(int16_t)x : x; }
    case 4: { uint32_t x; memcpy(&x, p, 4); return sign ? (uint64_t)(int64_t)(int32_t)x : x; }
    default: { uint64_t x; memcpy(&x, p, 8); return x; }
    }
}

#define RECORD_BLOCK 65536 /* records counted and placed together: their counts stay in cache */

/* layout_own(base, base_wide, recs, poss, wide): the own events laid out by counting. `recs`:
 * per event part in fill order (by seq offset, then add order) its events' records,
 * ascending; an event's own position is base[r] (the events of the records before r) plus the
 * events of record r before it in fill order, written to the part's array in `poss`.
 * base (n_rec + 1 entries, int32 or int64) gets the record starts. Records are taken a block at
 * a time (counting, then starts, then positions), so the counts stay in the cache. rec and
 * pos int32 or, with `wide`, int64. */
static PyObject *layout_own(PyObject *self, PyObject *args)
{
    Py_buffer base;
    int base_wide, wide;
    PyObject *recs, *poss;
    if (!PyArg_ParseTuple(args, "w*pO!O!p", &base, &base_wide, &PyTuple_Type, &recs,
                          &PyTuple_Type, &poss, &wide))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t np_ = PyTuple_GET_SIZE(recs), got = 0;
    Py_ssize_t n_rec = base.len / (base_wide ? 8 : 4) - 1;
    Py_buffer *rb = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_buffer));
    Py_buffer *pb = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_buffer));
    Py_ssize_t *c1 = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_ssize_t));
    Py_ssize_t *c2 = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_ssize_t));
    int32_t *cnt = malloc(RECORD_BLOCK * sizeof(int32_t));
    if (!rb || !pb || !c1 || !c2 || !cnt) { PyErr_NoMemory(); goto done; }
    if (n_rec < 0 || PyTuple_GET_SIZE(poss) != np_) {
        PyErr_SetString(PyExc_ValueError, "layout_own: bad arguments");
        goto done;
    }
    for (; got < np_; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(recs, got), &rb[got], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(poss, got), &pb[got],
                               PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            PyBuffer_Release(&rb[got]);
            goto done;
        }
        Py_ssize_t n = rb[got].len / (wide ? 8 : 4);
        int64_t prev = 0;
        if (pb[got].len != rb[got].len) {
            PyErr_SetString(PyExc_ValueError, "layout_own: lengths differ");
            got++;
            goto done;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            int64_t r = load_index(rb[got].buf, j, wide);
            if (r < prev || r >= n_rec) {
                PyErr_SetString(PyExc_IndexError, "layout_own: records out of range or order");
                got++;
                goto done;
            }
            prev = r;
        }
    }
    {
        int64_t running = 0;
        for (int64_t r0 = 0; r0 < n_rec; r0 += RECORD_BLOCK) {
            int64_t r1 = r0 + RECORD_BLOCK < n_rec ? r0 + RECORD_BLOCK : n_rec;
            memset(cnt, 0, (size_t)(r1 - r0) * sizeof(int32_t));
            for (Py_ssize_t k = 0; k < np_; k++) {
                Py_ssize_t n = rb[k].len / (wide ? 8 : 4), j = c1[k];
                for (; j < n; j++) {
                    int64_t r = load_index(rb[k].buf, j, wide);
                    if (r >= r1) break;
                    cnt[r - r0]++;
                }
                c1[k] = j;
            }
            for (int64_t r = r0; r < r1; r++) {
                if (base_wide) ((int64_t *)base.buf)[r] = running;
                else ((int32_t *)base.buf)[r] = (int32_t)running;
                running += cnt[r - r0];
                cnt[r - r0] = 0;  /* now the fill of the record */
            }
            for (Py_ssize_t k = 0; k < np_; k++) {
                Py_ssize_t n = rb[k].len / (wide ? 8 : 4), j = c2[k];
                for (; j < n; j++) {
                    int64_t r = load_index(rb[k].buf, j, wide);
                    if (r >= r1) break;
                    int64_t at = load_index(base.buf, r, base_wide) + cnt[r - r0]++;
                    if (wide) ((int64_t *)pb[k].buf)[j] = at;
                    else ((int32_t *)pb[k].buf)[j] = (int32_t)at;
                }
                c2[k] = j;
            }
        }
        if (base_wide) ((int64_t *)base.buf)[n_rec] = running;
        else ((int32_t *)base.buf)[n_rec] = (int32_t)running;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t k = 0; k < got; k++) {
        PyBuffer_Release(&rb[k]);
        PyBuffer_Release(&pb[k]);
    }
    free(rb);
    free(pb);
    free(c1);
    free(c2);
    free(cnt);
    PyBuffer_Release(&base);
    return result;
}

/* A column of event values: zero, one value for all, an integer array (1, 2, 4 or 8 bytes,
 * signed or not: widened as numpy casts to uint64), or bits of the record's fields. */
enum { COL_ZERO = 0, COL_SCALAR = 1, COL_ARRAY = 2, COL_BITS = 3 };

typedef struct {
    int mode;
    uint64_t value;
    Py_buffer buf;
    Py_ssize_t size;
    int sign;
    Py_ssize_t n_terms;
} Column;

/* (mode, obj, itemsize, signed) -> Column; returns 0 on error (exception set). */
static int parse_column(PyObject *spec, Column *col, Py_ssize_t n, Py_ssize_t rec_item)
{
    PyObject *obj;
    int mode, sign;
    Py_ssize_t size;
    col->mode = COL_ZERO;
    col->buf.obj = NULL;
    if (!PyArg_ParseTuple(spec, "iOni", &mode, &obj, &size, &sign))
        return 0;
    col->size = size;
    col->sign = sign;
    if (mode == COL_ZERO)
        return 1;
    if (mode == COL_SCALAR) {
        col->value = PyLong_AsUnsignedLongLongMask(obj);
        if (col->value == (uint64_t)-1 && PyErr_Occurred())
            return 0;
        col->mode = COL_SCALAR;
        return 1;
    }
    if (mode != COL_ARRAY && mode != COL_BITS) {
        PyErr_SetString(PyExc_ValueError, "fill_rows: bad column mode");
        return 0;
    }
    if (PyObject_GetBuffer(obj, &col->buf, PyBUF_C_CONTIGUOUS) < 0) {
        col->buf.obj = NULL;
        return 0;
    }
    col->mode = mode;
    if (mode == COL_ARRAY) {
        if ((size != 1 && size != 2 && size != 4 && size != 8) || col->buf.len < n * size) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: column too short");
            return 0;
        }
        return 1;
    }
    col->n_terms = col->buf.len / (Py_ssize_t)(4 * sizeof(int64_t));
    const int64_t *t = col->buf.buf;
    for (Py_ssize_t k = 0; k < col->n_terms; k++)
        if (t[4 * k] < 0 || t[4 * k] + 8 > rec_item || t[4 * k + 1] < 0 || t[4 * k + 1] > 63
            || t[4 * k + 3] < 0 || t[4 * k + 3] > 63) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: bad record bits");
            return 0;
        }
    return 1;
}

static inline uint64_t column_value(const Column *col, Py_ssize_t j, const unsigned char *row)
{
    switch (col->mode) {
    case COL_SCALAR: return col->value;
    case COL_ARRAY: return load_int((const unsigned char *)col->buf.buf + j * col->size, col->size, col->sign);
    case COL_BITS: {
        const int64_t *t = col->buf.buf;
        uint64_t v = 0;
        for (Py_ssize_t k = 0; k < col->n_terms; k++, t += 4) {
            uint64_t x;
            memcpy(&x, row + t[0], 8);
            v |= ((x >> t[1]) & (uint64_t)t[2]) << t[3];
        }
        return v;
    }
    default: return 0;
    }
}

#define N_COLS 8 /* type, ref, p1 .. p6 */
/* column k (type, ref, p1 .. p6) of an event row, as numpy's cast to its field stores it */
static inline void store_column(unsigned char *row, const int64_t *lay, int k, uint64_t v)
{
    if (k == 0) {
        uint8_t x = (uint8_t)v;
        memcpy(row + lay[1], &x, 1);
    } else if (k == 1) {
        uint32_t x = (uint32_t)v;
        memcpy(row + lay[2], &x, 4);
    } else
        memcpy(row + lay[3 + k], &v, 8);
}

#define BLOCK 4096 /* own positions written together: their rows and records stay in cache */

/* what the record touch of fill_rows read (kept so that the reads are not optimized out) */
static volatile uint64_t touched;

/* One event part of a piece: records, own positions, seq offset and columns. */
typedef struct {
    Py_buffer rec, pos;
    int wide, offset;
    Py_ssize_t n, at; /* events; the next one to write */
    Py_ssize_t f, li; /* foreign events at or before it; its location (index into bounds) */
    Column col[N_COLS];
    unsigned char row[128]; /* the row with what is the same for every event (type, scalars) */
    int dyn[N_COLS], n_dyn; /* the columns that vary by event */
} Part;

static void release_part(Part *q)
{
    for (int k = 0; k < N_COLS; k++)
        if (q->col[k].buf.obj != NULL)
            PyBuffer_Release(&q->col[k].buf);
    if (q->rec.obj != NULL)
        PyBuffer_Release(&q->rec);
    if (q->pos.obj != NULL)
        PyBuffer_Release(&q->pos);
}

/* fill_rows(e, e_item, layout, recs, rec_item, own_lo, own_hi, f_ins, loc_lo, bounds, parts):
 * the rows of a piece's own events, every byte. `parts`: a tuple of (rec, pos, wide, offset,
 * cols), the events of one part in the piece, pos strictly ascending in
 * [own_lo, own_hi). Event j of a part goes to row pos[j] - own_lo + (foreign events inserted at
 * or before pos[j]: f_ins, ascending) of `e` with location loc_lo + i where bounds[i] <=
 * pos[j] < bounds[i + 1], the time of record rec[j] (`layout`: the offsets of the event fields
 * loc, type, ref, time, seq, p1 .. p6, then of the record fields loc and time), seq
 * 8 * rec[j] + offset, and type, ref, p1 .. p6 from `cols` (eight (mode, obj, itemsize,
 * signed)). The parts are written BLOCK own positions at a time (each part's events of the
 * block in turn), so that the block's rows and records are read from the cache. */
static PyObject *fill_rows(PyObject *self, PyObject *args)
{
    Py_buffer e, layout, recs, fins, bounds;
    Py_ssize_t e_item, rec_item;
    long long own_lo, own_hi, loc_lo;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "w*ny*y*nLLy*Ly*O!", &e, &e_item, &layout, &recs, &rec_item,
                          &own_lo, &own_hi, &fins, &loc_lo, &bounds, &PyTuple_Type, &parts))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t np_ = PyTuple_GET_SIZE(parts), made = 0;
    Part *q = calloc(np_ ? (size_t)np_ : 1, sizeof(Part));
    Py_ssize_t nf = fins.len / 8, n_ob = bounds.len / 8;
    Py_ssize_t n_rows = e_item > 0 ? e.len / e_item : 0;
    Py_ssize_t n_recs = rec_item > 0 ? recs.len / rec_item : 0;
    const int64_t *lay = layout.buf, *fi = fins.buf, *ob = bounds.buf;
    if (q == NULL) { PyErr_NoMemory(); goto done; }
    if (layout.len != 13 * 8 || n_ob < 1) {
        PyErr_SetString(PyExc_ValueError, "fill_rows: bad arguments");
        goto done;
    }
    for (int k = 0; k < 11; k++)
        if (lay[k] < 0 || lay[k] + (k == 1 ? 1 : k == 0 || k == 2 ? 4 : 8) > e_item) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: bad layout");
            goto done;
        }
    if (lay[11] < 0 || lay[11] + 4 > rec_item || lay[12] < 0 || lay[12] + 8 > rec_item
        || e_item > 128) {
        PyErr_SetString(PyExc_ValueError, "fill_rows: bad record layout");
        goto done;
    }
    for (; made < np_; made++) {
        Part *p = &q[made];
        PyObject *cols, *recobj, *posobj;
        for (int k = 0; k < N_COLS; k++) {
            p->col[k].mode = COL_ZERO;
            p->col[k].buf.obj = NULL;
        }
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(parts, made), "OOpiO!", &recobj, &posobj,
                              &p->wide, &p->offset, &PyTuple_Type, &cols))
            goto done;
        if (PyObject_GetBuffer(recobj, &p->rec, PyBUF_C_CONTIGUOUS) < 0) {
            p->rec.obj = NULL;
            goto done;
        }
        if (PyObject_GetBuffer(posobj, &p->pos, PyBUF_C_CONTIGUOUS) < 0) {
            p->pos.obj = NULL;
            goto done;
        }
        p->n = p->rec.len / (p->wide ? 8 : 4);
        if (p->pos.len != p->rec.len || PyTuple_GET_SIZE(cols) != N_COLS) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: bad part");
            goto done;
        }
        for (int k = 0; k < N_COLS; k++)
            if (!parse_column(PyTuple_GET_ITEM(cols, k), &p->col[k], p->n, rec_item))
                goto done;
        memset(p->row, 0, sizeof p->row);
        p->n_dyn = 0;
        for (int k = 0; k < N_COLS; k++) {
            if (p->col[k].mode == COL_ARRAY || p->col[k].mode == COL_BITS)
                p->dyn[p->n_dyn++] = k;
            else
                store_column(p->row, lay, k, column_value(&p->col[k], 0, NULL));
        }
    }
    /* every row a position of [own_lo, own_hi) can go to lies in e, and in a location of
     * `bounds` (each event's own position and record are checked as its block is read) */
    if (own_hi - own_lo + nf > n_rows || own_lo < 0 || ob[0] > own_lo || ob[n_ob - 1] < own_hi) {
        PyErr_SetString(PyExc_IndexError, "fill_rows: piece out of range");
        goto done;
    }
    for (Py_ssize_t i = 0; i + 1 < n_ob; i++)
        if (ob[i + 1] < ob[i]) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: bounds not ascending");
            goto done;
        }
    for (Py_ssize_t f = 0; f + 1 < nf; f++)
        if (fi[f + 1] < fi[f]) {
            PyErr_SetString(PyExc_ValueError, "fill_rows: foreign insertions not ascending");
            goto done;
        }
    {
        const unsigned char *rb = recs.buf;
        unsigned char *eb = e.buf;
        for (int64_t stop = own_lo + BLOCK;; stop += BLOCK) {
            int more = 0;
            /* the block's events checked (positions strictly ascending inside the piece,
             * records in the table), and the block's records read once in address order
             * (many loads in flight, the hardware prefetcher streaming) before the parts read
             * them out of order */
            int64_t r_min = INT64_MAX, r_max = -1;
            for (Py_ssize_t k = 0; k < np_; k++) {
                Part *p = &q[k];
                int64_t prev = p->at ? load_index(p->pos.buf, p->at - 1, p->wide) : own_lo - 1;
                for (Py_ssize_t j = p->at; j < p->n; j++) {
                    int64_t x = load_index(p->pos.buf, j, p->wide);
                    if (x >= stop && x < own_hi)
                        break;
                    int64_t r = load_index(p->rec.buf, j, p->wide);
                    if (x <= prev || x >= own_hi || r < 0 || r >= n_recs) {
                        PyErr_SetString(PyExc_IndexError, "fill_rows: event out of range");
                        goto done;
                    }
                    prev = x;
                    if (r < r_min) r_min = r;
                    if (r > r_max) r_max = r;
                }
            }
            /* the next block's records (about as many, right after these) are asked for
             * while this block's rows are written, a cache line per event */
            const unsigned char *pf = rb, *pf_end = rb;
            if (r_max >= r_min) {
                uint64_t acc = 0;
                const unsigned char *end = rb + (r_max + 1) * rec_item;
                for (const unsigned char *c = rb + r_min * rec_item; c < end; c += 64)
                    acc += *c;
                touched += acc;
                int64_t next_end = r_max + 1 + (r_max - r_min + 1);
                pf = end;
                pf_end = rb + (next_end < n_recs ? next_end : n_recs) * rec_item;
            }
            for (Py_ssize_t k = 0; k < np_; k++) {
                Part *p = &q[k];
                Py_ssize_t j = p->at, f = p->f, li = p->li;
                unsigned char row[128];
                memcpy(row, p->row, (size_t)e_item);
                for (; j < p->n; j++) {
                    int64_t r = load_index(p->rec.buf, j, p->wide);
                    int64_t x = load_index(p->pos.buf, j, p->wide);
                    if (x >= stop)
                        break;
                    while (f < nf && fi[f] <= x) f++;
                    while (ob[li + 1] <= x) li++;
                    const unsigned char *s = rb + r * rec_item;
                    if (pf < pf_end) {
                        __builtin_prefetch(pf);
                        pf += 64;
                    }
                    uint64_t seq = (uint64_t)r * 8u + (uint64_t)p->offset;
                    uint32_t loc = (uint32_t)(loc_lo + li);
                    memcpy(row + lay[0], &loc, 4);
                    memcpy(row + lay[3], s + lay[12], 8);
                    memcpy(row + lay[4], &seq, 8);
                    for (int c = 0; c < p->n_dyn; c++) {
                        int col = p->dyn[c];
                        store_column(row, lay, col, column_value(&p->col[col], j, s));
                    }
                    memcpy(eb + (x - own_lo + f) * e_item, row, (size_t)e_item);
                }
                p->at = j, p->f = f, p->li = li;
                more |= j < p->n;
            }
            if (!more)
                break;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (q != NULL) {
        for (Py_ssize_t k = 0; k < made && k < np_; k++)
            release_part(&q[k]);
        if (made < np_)  /* the part being parsed when an error stopped it */
            release_part(&q[made]);
        free(q);
    }
    PyBuffer_Release(&e);
    PyBuffer_Release(&layout);
    PyBuffer_Release(&recs);
    PyBuffer_Release(&fins);
    PyBuffer_Release(&bounds);
    return result;
}

/* region_walk(own_start, parts, f_code, f_insert, f_start, flags): per location L, its own
 * region events merged with its foreign ones (f_code[f_start[L]:f_start[L + 1]], each before
 * the own position f_insert[k]) in final order; a code > 0 enters region code - 1, < 0 leaves
 * region -code - 1, 0 is another event. `parts`: per own region part (pos, wide, ref, step),
 * positions strictly ascending, ref a column as in fill_rows (values below 2^31 - 1), step +1
 * (Enter) or -1 (Leave): its events' codes step * (ref + 1), laid into a buffer of the
 * location's own positions one location at a time. flags[L] = 1 when a Leave is not of the
 * innermost open region (or none is open) or a region is left open at the end. int64 but
 * f_code (int32) and flags (uint8). */
static PyObject *region_walk(PyObject *self, PyObject *args)
{
    Py_buffer own_start, f_code, f_insert, f_start, flags;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "y*O!y*y*y*w*", &own_start, &PyTuple_Type, &parts, &f_code,
                          &f_insert, &f_start, &flags))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_loc = flags.len, nf = f_code.len / 4, np_ = PyTuple_GET_SIZE(parts), got = 0;
    const int32_t *fc = f_code.buf;
    const int64_t *os = own_start.buf, *fins = f_insert.buf, *fs = f_start.buf;
    uint8_t *out = flags.buf;
    int32_t *stack = NULL, *code = NULL;
    Py_ssize_t cap = 0, longest = 0;
    Py_buffer *pb = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_buffer));
    Column *col = calloc(np_ ? (size_t)np_ : 1, sizeof(Column));
    int *wide = calloc(np_ ? (size_t)np_ : 1, sizeof(int)), *step = calloc(np_ ? (size_t)np_ : 1, sizeof(int));
    Py_ssize_t *cur = calloc(np_ ? (size_t)np_ : 1, sizeof(Py_ssize_t));
    if (!pb || !col || !wide || !step || !cur) { PyErr_NoMemory(); goto done; }
    if (own_start.len != (n_loc + 1) * 8 || f_start.len != (n_loc + 1) * 8
        || f_insert.len != nf * 8) {
        PyErr_SetString(PyExc_ValueError, "region_walk: lengths differ");
        goto done;
    }
    for (Py_ssize_t L = 0; L < n_loc; L++) {
        if (os[L] < 0 || os[L] > os[L + 1] || fs[L] < 0 || fs[L] > fs[L + 1] || fs[L + 1] > nf) {
            PyErr_SetString(PyExc_IndexError, "region_walk: bad ranges");
            goto done;
        }
        if (os[L + 1] - os[L] > longest) longest = os[L + 1] - os[L];
    }
    for (; got < np_; got++) {
        PyObject *posobj, *spec;
        col[got].buf.obj = NULL;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(parts, got), "OpOi", &posobj, &wide[got], &spec,
                              &step[got]))
            goto done;
        if (PyObject_GetBuffer(posobj, &pb[got], PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        Py_ssize_t n = pb[got].len / (wide[got] ? 8 : 4);
        if (!parse_column(spec, &col[got], n, 0) || col[got].mode == COL_BITS) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "region_walk: bad ref");
            got++;
            goto done;
        }
    }
    code = malloc((size_t)(longest ? longest : 1) * sizeof(int32_t));
    if (code == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t L = 0; L < n_loc; L++) {
        int64_t lo = os[L], hi = os[L + 1];
        Py_ssize_t need = (hi - lo) + (fs[L + 1] - fs[L]);
        memset(code, 0, (size_t)(hi - lo) * sizeof(int32_t));
        for (Py_ssize_t k = 0; k < np_; k++) {
            Py_ssize_t n = pb[k].len / (wide[k] ? 8 : 4), j = cur[k];
            for (; j < n; j++) {
                int64_t x = load_index(pb[k].buf, j, wide[k]);
                if (x >= hi)
                    break;
                if (x < lo || (j && x <= load_index(pb[k].buf, j - 1, wide[k]))) {
                    PyErr_SetString(PyExc_IndexError, "region_walk: positions out of order");
                    goto done;
                }
                code[x - lo] = step[k] * (int32_t)((int64_t)column_value(&col[k], j, NULL) + 1);
            }
            cur[k] = j;
        }
        if (need > cap) {
            free(stack);
            cap = need;
            stack = malloc((size_t)cap * sizeof(int32_t));
            if (stack == NULL) { PyErr_NoMemory(); goto done; }
        }
        Py_ssize_t depth = 0, k = fs[L];
        int bad = 0;
        for (int64_t p = lo; p <= hi && !bad; p++) {
            for (; k < fs[L + 1] && (p == hi || fins[k] <= p) && !bad; k++) {
                int32_t v = fc[k];
                if (v > 0) stack[depth++] = v;
                else if (v < 0) {
                    if (depth == 0 || stack[depth - 1] != -v) bad = 1;
                    else depth--;
                }
            }
            if (p == hi || bad)
                break;
            int32_t v = code[p - lo];
            if (v > 0) stack[depth++] = v;
            else if (v < 0) {
                if (depth == 0 || stack[depth - 1] != -v) bad = 1;
                else depth--;
            }
        }
        out[L] = (uint8_t)(bad || depth != 0);
    }
    for (Py_ssize_t k = 0; k < np_; k++)
        if (cur[k] != pb[k].len / (wide[k] ? 8 : 4)) {
            PyErr_SetString(PyExc_IndexError, "region_walk: positions past the last location");
            goto done;
        }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t k = 0; k < got; k++) {
        PyBuffer_Release(&pb[k]);
        if (col[k].buf.obj != NULL)
            PyBuffer_Release(&col[k].buf);
    }
    if (got < np_ && pb != NULL && pb[got].obj != NULL)
        PyBuffer_Release(&pb[got]);
    free(pb);
    free(col);
    free(wide);
    free(step);
    free(cur);
    free(stack);
    free(code);
    PyBuffer_Release(&own_start);
    PyBuffer_Release(&f_code);
    PyBuffer_Release(&f_insert);
    PyBuffer_Release(&f_start);
    PyBuffer_Release(&flags);
    return result;
}

/* written_span(recs, rec_item, code_off, time_off, usable, good, span): good[i] = usable[i]
 * and record i has a code (uint16 at code_off, not 0); span = [least, greatest] time (int64
 * at time_off) of those records (int64 max and min when none). One pass over the rows. */
static PyObject *written_span(PyObject *self, PyObject *args)
{
    Py_buffer recs, usable, good, span;
    Py_ssize_t rec_item, code_off, time_off;
    if (!PyArg_ParseTuple(args, "y*nnny*w*w*", &recs, &rec_item, &code_off, &time_off, &usable,
                          &good, &span))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = rec_item > 0 ? recs.len / rec_item : 0;
    if (rec_item <= 0 || usable.len != n || good.len != n || span.len != 16 || code_off < 0
        || code_off + 2 > rec_item || time_off < 0 || time_off + 8 > rec_item) {
        PyErr_SetString(PyExc_ValueError, "written_span: bad arguments");
        goto done;
    }
    {
        const unsigned char *r = recs.buf;
        const uint8_t *u = usable.buf;
        uint8_t *g = good.buf;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (Py_ssize_t i = 0; i < n; i++, r += rec_item) {
            uint16_t code;
            memcpy(&code, r + code_off, 2);
            uint8_t ok = (uint8_t)(u[i] != 0 && code != 0);
            g[i] = ok;
            if (ok) {
                int64_t t;
                memcpy(&t, r + time_off, 8);
                if (t < lo) lo = t;
                if (t > hi) hi = t;
            }
        }
        ((int64_t *)span.buf)[0] = lo;
        ((int64_t *)span.buf)[1] = hi;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&recs);
    PyBuffer_Release(&usable);
    PyBuffer_Release(&good);
    PyBuffer_Release(&span);
    return result;
}

#define AHEAD 16 /* records ahead whose rows take_field and select_refs ask the cache for */

/* take_field(recs, rec_item, field_off, idx, wide, out): out[j] = the uint64 field at
 * field_off of record idx[j] (the records ahead asked for early: the gather waits on memory,
 * not on work). */
static PyObject *take_field(PyObject *self, PyObject *args)
{
    Py_buffer recs, idx, out;
    Py_ssize_t rec_item, off;
    int wide;
    if (!PyArg_ParseTuple(args, "y*nny*pw*", &recs, &rec_item, &off, &idx, &wide, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = idx.len / (wide ? 8 : 4);
    Py_ssize_t n_recs = rec_item > 0 ? recs.len / rec_item : 0;
    uint64_t *o = out.buf;
    if (out.len != n * 8 || off < 0 || off + 8 > rec_item) {
        PyErr_SetString(PyExc_ValueError, "take_field: bad arguments");
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t r = load_index(idx.buf, j, wide);
        if (r < 0 || r >= n_recs) { PyErr_SetString(PyExc_IndexError, "take_field: record out of range"); goto done; }
    }
    {
        const unsigned char *rb = (const unsigned char *)recs.buf + off;
        for (Py_ssize_t j = 0; j < n; j++) {
            if (j + AHEAD < n)
                __builtin_prefetch(rb + load_index(idx.buf, j + AHEAD, wide) * rec_item);
            memcpy(&o[j], rb + load_index(idx.buf, j, wide) * rec_item, 8);
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&recs);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&out);
    return result;
}

/* select_refs(recs, rec_item, field_off, idx, wide, good, table, written, out_i, out_ref,
 * out_bad): of the records idx (int32 or, with `wide`, int64) those with good[r], in order,
 * their uint64 field at field_off mapped through `table` (int32, a direct table whose last
 * entry stands for every id past it): the ones mapped to a ref >= 0 go to out_i / out_ref
 * and are marked in `written` (bool), the others to out_bad (all outputs of idx's dtype but
 * out_ref, int32). Returns (how many mapped, how many not). */
static PyObject *select_refs(PyObject *self, PyObject *args)
{
    Py_buffer recs, idx, good, table, written, oi, oref, obad;
    Py_ssize_t rec_item, off;
    int wide;
    if (!PyArg_ParseTuple(args, "y*nny*py*y*w*w*w*w*", &recs, &rec_item, &off, &idx, &wide,
                          &good, &table, &written, &oi, &oref, &obad))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = idx.len / (wide ? 8 : 4), nt = table.len / 4;
    Py_ssize_t n_recs = rec_item > 0 ? recs.len / rec_item : 0;
    const int32_t *t = table.buf;
    const uint8_t *g = good.buf;
    uint8_t *w = written.buf;
    int32_t *ref = oref.buf;
    if (nt < 1 || off < 0 || off + 8 > rec_item || good.len != n_recs || written.len != n_recs
        || oi.len != idx.len || obad.len != idx.len || oref.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "select_refs: bad arguments");
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t r = load_index(idx.buf, j, wide);
        if (r < 0 || r >= n_recs) { PyErr_SetString(PyExc_IndexError, "select_refs: record out of range"); goto done; }
    }
    {
        const unsigned char *rb = (const unsigned char *)recs.buf + off;
        Py_ssize_t n_ok = 0, n_bad = 0;
        uint64_t last = (uint64_t)(nt - 1);
        for (Py_ssize_t j = 0; j < n; j++) {
            if (j + AHEAD < n)
                __builtin_prefetch(rb + load_index(idx.buf, j + AHEAD, wide) * rec_item);
            int64_t r = load_index(idx.buf, j, wide);
            if (!g[r])
                continue;
            uint64_t v;
            memcpy(&v, rb + r * rec_item, 8);
            int32_t x = t[v < last ? v : last];
            if (x >= 0) {
                if (wide) ((int64_t *)oi.buf)[n_ok] = r;
                else ((int32_t *)oi.buf)[n_ok] = (int32_t)r;
                ref[n_ok++] = x;
                w[r] = 1;
            } else if (wide) ((int64_t *)obad.buf)[n_bad++] = r;
            else ((int32_t *)obad.buf)[n_bad++] = (int32_t)r;
        }
        result = Py_BuildValue("nn", n_ok, n_bad);
    }
done:
    PyBuffer_Release(&recs);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&good);
    PyBuffer_Release(&table);
    PyBuffer_Release(&written);
    PyBuffer_Release(&oi);
    PyBuffer_Release(&oref);
    PyBuffer_Release(&obad);
    return result;
}

static PyMethodDef methods[] = {
    {"layout_own", layout_own, METH_VARARGS,
     "layout_own(base, base_wide, recs, poss, wide): own positions by counting"},
    {"fill_rows", fill_rows, METH_VARARGS,
     "fill_rows(e, e_item, layout, recs, rec_item, own_lo, own_hi, f_ins, loc_lo, bounds, "
     "parts): the rows of a piece's own events"},
    {"region_walk", region_walk, METH_VARARGS,
     "region_walk(own_start, parts, f_code, f_insert, f_start, flags): locations whose Enter "
     "and Leave do not balance and nest"},
    {"take_field", take_field, METH_VARARGS,
     "take_field(recs, rec_item, field_off, idx, wide, out): a uint64 field of chosen records"},
    {"select_refs", select_refs, METH_VARARGS,
     "select_refs(recs, rec_item, field_off, idx, wide, good, table, written, out_i, out_ref, "
     "out_bad): the records with a time, their ids through a direct table"},
    {"written_span", written_span, METH_VARARGS,
     "written_span(recs, rec_item, code_off, time_off, usable, good, span): the records to "
     "write and their least and greatest time"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_emitloops",
    "Per-event loops of emit (cell_otf2/emit/kernels.py binds them).", -1, methods,
};

PyMODINIT_FUNC PyInit__emitloops(void)
{
    return PyModule_Create(&module);
}
