/* Per-record loops of reading and decoding in C: `frame` frames a chunk of a dump's
 * slots into the reader's tables in one sequential pass (reader.py's numpy framer is its
 * fallback); `gather` copies chosen fields of
 * chosen rows of one packed table into consecutive rows of another, converting each field on
 * the way (byte swap, zero or sign extension, or truncation), as numpy's field assignment
 * does, without a temporary per field; `dma_complete` finds each DMA command's completing tag
 * wait in one sweep (match.py's per-tag search); `unwrap` and `run_locals` the vector steps
 * of intervals.split_intervals and `split_live` its walk over switches and DECR_WRITEs;
 * `wrap_room` decode._wrap_candidates' per-reading rule; `place_readings` writes a context's
 * decoded readings to their rows and anchors.
 *
 * Built by setuptools at install time (setup.py, optional); reached only through
 * cell_otf2/native/record_loops.py, which takes its numpy twins, with the same results, where
 * native.helper does not give this module (not built, or CELL2OTF2_NO_NATIVE set).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t load(const unsigned char *p, int64_t size, int swap, int sign)
{
    uint64_t v = 0;
    switch (size) {
    case 1: { uint8_t x; memcpy(&x, p, 1); v = sign ? (uint64_t)(int64_t)(int8_t)x : x; break; }
    case 2: {
        uint16_t x; memcpy(&x, p, 2);
        if (swap) x = __builtin_bswap16(x);
        v = sign ? (uint64_t)(int64_t)(int16_t)x : x;
        break;
    }
    case 4: {
        uint32_t x; memcpy(&x, p, 4);
        if (swap) x = __builtin_bswap32(x);
        v = sign ? (uint64_t)(int64_t)(int32_t)x : x;
        break;
    }
    default: {
        uint64_t x; memcpy(&x, p, 8);
        if (swap) x = __builtin_bswap64(x);
        v = x;
    }
    }
    return v;
}

static inline void store(unsigned char *p, int64_t size, uint64_t v)
{
    switch (size) {
    case 1: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8);
    }
}

/* gather(dst, dst_itemsize, src, src_itemsize, idx, fields[, columns]): for i in
 * range(len(idx)), row i of dst gets fields of row idx[i] of src; `fields` is int64 rows of
 * (src_offset, src_size, dst_offset, dst_size, swap, signed). `columns`: a tuple of
 * (values, width, dst_offset), each values a buffer of len(idx) native values of `width`
 * bytes, or of one value for every row, copied into row i at dst_offset: every field of a
 * row written in one pass. Buffers are bytes; the caller checks that idx is in range
 * (checked again here). */
#define MAX_COLUMNS 8
static PyObject *gather(PyObject *self, PyObject *args)
{
    Py_buffer dst, src, idx, fields;
    Py_buffer col[MAX_COLUMNS];
    Py_ssize_t col_width[MAX_COLUMNS], col_off[MAX_COLUMNS], col_step[MAX_COLUMNS];
    Py_ssize_t dst_item, src_item, ncol = 0;
    PyObject *columns = NULL;
    if (!PyArg_ParseTuple(args, "w*ny*ny*y*|O!", &dst, &dst_item, &src, &src_item, &idx,
                          &fields, &PyTuple_Type, &columns))
        return NULL;
    PyObject *result = NULL;
    if (columns != NULL) {
        if (PyTuple_GET_SIZE(columns) > MAX_COLUMNS) {
            PyErr_SetString(PyExc_ValueError, "gather: too many columns");
            goto done;
        }
        for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(columns); c++) {
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, c), "y*nn", &col[ncol],
                                  &col_width[ncol], &col_off[ncol]))
                goto done;
            ncol++;
        }
    }
    Py_ssize_t n = idx.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t nf = fields.len / (Py_ssize_t)(6 * sizeof(int64_t));
    Py_ssize_t src_rows = src_item > 0 ? src.len / src_item : 0;
    const int64_t *ix = (const int64_t *)idx.buf;
    const int64_t *f = (const int64_t *)fields.buf;
    if (dst_item <= 0 || src_item <= 0 || n * dst_item > dst.len) {
        PyErr_SetString(PyExc_ValueError, "gather: destination too small");
        goto done;
    }
    for (Py_ssize_t k = 0; k < nf; k++) {
        const int64_t *g = f + 6 * k;
        if (g[0] < 0 || g[0] + g[1] > src_item || g[2] < 0 || g[2] + g[3] > dst_item
            || (g[1] != 1 && g[1] != 2 && g[1] != 4 && g[1] != 8)
            || (g[3] != 1 && g[3] != 2 && g[3] != 4 && g[3] != 8)) {
            PyErr_SetString(PyExc_ValueError, "gather: bad field");
            goto done;
        }
    }
    for (Py_ssize_t c = 0; c < ncol; c++) {
        Py_ssize_t w = col_width[c];
        if ((w != 1 && w != 2 && w != 4 && w != 8) || col_off[c] < 0
            || col_off[c] + w > dst_item || (col[c].len != w && col[c].len != n * w)) {
            PyErr_SetString(PyExc_ValueError, "gather: bad column");
            goto done;
        }
        col_step[c] = col[c].len == n * w ? w : 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= src_rows) {
            PyErr_SetString(PyExc_IndexError, "gather: row out of range");
            goto done;
        }
    }
    {
        const unsigned char *s0 = (const unsigned char *)src.buf;
        unsigned char *d = (unsigned char *)dst.buf;
        for (Py_ssize_t i = 0; i < n; i++, d += dst_item) {
            const unsigned char *s = s0 + ix[i] * src_item;
            for (Py_ssize_t k = 0; k < nf; k++) {
                const int64_t *g = f + 6 * k;
                store(d + g[2], g[3], load(s + g[0], g[1], (int)g[4], (int)g[5]));
            }
            for (Py_ssize_t c = 0; c < ncol; c++)
                memcpy(d + col_off[c], (const unsigned char *)col[c].buf + i * col_step[c],
                       (size_t)col_width[c]);
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t c = 0; c < ncol; c++)
        PyBuffer_Release(&col[c]);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&fields);
    return result;
}

/* dma_complete(issue, tag, waits, status, epoch, out): per DMA command (record indexes
 * `issue`, ascending, with `tag`), the first of the context's TAG_WAIT_END records (`waits`,
 * ascending) after it whose `status` has bit `tag` set, or -1 (also when the two lie in
 * different loss epochs: `epoch` per record). One backward sweep keeping, per tag, the nearest
 * such wait after the sweep's position. int64 arrays but `status` (uint64) and `epoch`
 * (int32); the caller checks the orders. */
static PyObject *dma_complete(PyObject *self, PyObject *args)
{
    Py_buffer issue, tag, waits, status, epoch, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*", &issue, &tag, &waits, &status, &epoch, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t ni = issue.len / 8, nw = waits.len / 8, ne = epoch.len / 4;
    const int64_t *is = issue.buf, *tg = tag.buf, *ws = waits.buf;
    const uint64_t *st = status.buf;
    const int32_t *ep = epoch.buf;
    int64_t *o = out.buf;
    if (tag.len != issue.len || out.len != issue.len || status.len != waits.len) {
        PyErr_SetString(PyExc_ValueError, "dma_complete: lengths differ");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ni; i++)
        if (is[i] < 0 || is[i] >= ne) { PyErr_SetString(PyExc_IndexError, "dma_complete"); goto done; }
    for (Py_ssize_t j = 0; j < nw; j++)
        if (ws[j] < 0 || ws[j] >= ne) { PyErr_SetString(PyExc_IndexError, "dma_complete"); goto done; }
    {
        int64_t nxt[64];
        for (int t = 0; t < 64; t++) nxt[t] = -1;
        Py_ssize_t j = nw - 1;
        for (Py_ssize_t i = ni - 1; i >= 0; i--) {
            for (; j >= 0 && ws[j] > is[i]; j--) {
                uint64_t bits = st[j];
                while (bits) {
                    int t = __builtin_ctzll(bits);
                    nxt[t] = ws[j];
                    bits &= bits - 1;
                }
            }
            int64_t t = tg[i], c = -1;
            if (t >= 0 && t < 64 && nxt[t] >= 0 && ep[nxt[t]] == ep[is[i]])
                c = nxt[t];
            o[i] = c;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&issue);
    PyBuffer_Release(&tag);
    PyBuffer_Release(&waits);
    PyBuffer_Release(&status);
    PyBuffer_Release(&epoch);
    PyBuffer_Release(&out);
    return result;
}

/* group16(keys, stride, offset, order, start): a stable counting sort of the native 16-bit
 * unsigned keys at byte `offset` of each `stride`-byte row of `keys`: `start` (65537 int64)
 * gets where each key's group begins, `order` (int32 or int64 per row, told by its length)
 * the row indexes grouped by key, ascending within a group. */
static PyObject *group16(PyObject *self, PyObject *args)
{
    Py_buffer keys, order, start;
    Py_ssize_t stride, offset;
    if (!PyArg_ParseTuple(args, "y*nnw*w*", &keys, &stride, &offset, &order, &start))
        return NULL;
    PyObject *result = NULL;
    int64_t *pos = NULL;
    Py_ssize_t n = stride > 0 ? keys.len / stride : 0;
    if (stride <= 0 || offset < 0 || offset + 2 > stride || n * stride != keys.len
        || start.len != 65537 * (Py_ssize_t)sizeof(int64_t)
        || (order.len != n * 4 && order.len != n * 8)) {
        PyErr_SetString(PyExc_ValueError, "group16: bad buffer sizes");
        goto done;
    }
    {
        int64_t *st = (int64_t *)start.buf;
        const unsigned char *k0 = (const unsigned char *)keys.buf + offset;
        uint16_t *kc;  /* the keys packed: the wide rows are read once */
        pos = (int64_t *)malloc(65536 * sizeof(int64_t) + (size_t)n * sizeof(uint16_t));
        if (pos == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        kc = (uint16_t *)(pos + 65536);
        memset(st, 0, 65537 * sizeof(int64_t));
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(&kc[i], k0 + i * stride, 2);
            st[kc[i] + 1]++;
        }
        for (Py_ssize_t j = 0; j < 65536; j++)
            st[j + 1] += st[j];
        memcpy(pos, st, 65536 * sizeof(int64_t));
        if (n > 0 && order.len == n * 8) {
            int64_t *o = (int64_t *)order.buf;
            for (Py_ssize_t i = 0; i < n; i++)
                o[pos[kc[i]]++] = i;
        } else {
            int32_t *o = (int32_t *)order.buf;
            for (Py_ssize_t i = 0; i < n; i++)
                o[pos[kc[i]]++] = (int32_t)i;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(pos);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&order);
    PyBuffer_Release(&start);
    return result;
}

/* time_bounds(rec, itemsize, code_off, domain_off, time_off, usable, first, last, span):
 * over the rows of `rec` (native uint16 code, int32 domain, int64 time at those offsets)
 * that are `usable` (one byte per row) with a code other than 0: the least and the greatest
 * time per domain >= 0 (`first` / `last`, int64 per domain, lowered / raised in place) and
 * over all of them (`span`: 2 int64, lowered / raised in place). A domain past `first`'s
 * length is an error. */
static PyObject *time_bounds(PyObject *self, PyObject *args)
{
    Py_buffer rec, usable, first, last, span;
    Py_ssize_t item, code_off, dom_off, time_off;
    if (!PyArg_ParseTuple(args, "y*nnnny*w*w*w*", &rec, &item, &code_off, &dom_off, &time_off,
                          &usable, &first, &last, &span))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = item > 0 ? rec.len / item : 0;
    Py_ssize_t nd = first.len / (Py_ssize_t)sizeof(int64_t);
    if (item <= 0 || n * item != rec.len || usable.len != n || last.len != first.len
        || span.len != 2 * (Py_ssize_t)sizeof(int64_t) || code_off < 0 || code_off + 2 > item
        || dom_off < 0 || dom_off + 4 > item || time_off < 0 || time_off + 8 > item) {
        PyErr_SetString(PyExc_ValueError, "time_bounds: bad buffer sizes");
        goto done;
    }
    {
        const unsigned char *r = (const unsigned char *)rec.buf;
        const unsigned char *ok = (const unsigned char *)usable.buf;
        int64_t *lo = (int64_t *)first.buf, *hi = (int64_t *)last.buf, *sp = (int64_t *)span.buf;
        for (Py_ssize_t i = 0; i < n; i++, r += item) {
            uint16_t code;
            int32_t dom;
            int64_t t;
            if (!ok[i])
                continue;
            memcpy(&code, r + code_off, 2);
            if (code == 0)
                continue;
            memcpy(&t, r + time_off, 8);
            if (t < sp[0])
                sp[0] = t;
            if (t > sp[1])
                sp[1] = t;
            memcpy(&dom, r + dom_off, 4);
            if (dom < 0)
                continue;
            if (dom >= nd) {
                PyErr_SetString(PyExc_IndexError, "time_bounds: domain out of range");
                goto done;
            }
            if (t < lo[dom])
                lo[dom] = t;
            if (t > hi[dom])
                hi[dom] = t;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&rec);
    PyBuffer_Release(&usable);
    PyBuffer_Release(&first);
    PyBuffer_Release(&last);
    PyBuffer_Release(&span);
    return result;
}

/* frame(raw, start, swap, table, ppe, ppe_item, ppe_spec, blk, blk_item, blk_spec, gap,
 *       gap_item, gap_spec, spe, spe_item, spe_spec, special, state, stats):
 * frames one chunk of a dump's slot stream (`raw`: whole 32-byte slots, global slot index of
 * the first `start`), as reader.py's numpy framer does chunk by chunk, in one sequential pass.
 * `table` (65536 bytes) gives each code's category (low 3 bits: 0 undefined, 1 PPE, 2 SPE,
 * 3 block header, 4 GAP) and whether it is top-level (bit 4). Each PPE record, block header,
 * GAP and SPE record inside a block is appended to its output table (`*_spec`: the field table
 * of `gather`, converting from the slot's bytes; `special`: int64 offsets, -1 for none, of
 * ppe slot, block slot, ctx (u16), count (u16), present (u16), gap slot, gap lost (u64), spe
 * slot, block (int64), ctx (u16)). `state` (int64, carried from chunk to chunk): last
 * top-level slot, its block (-1: not a block), rows written to ppe, blocks, spe (records
 * inside blocks), gaps, undefined codes inside blocks, and SPE records with no row left
 * (`next`, `end`: int64 per context id; given, the SPE table is grouped by context, context
 * c's records going to rows next[c] (advanced) up to end[c], in slot order). `stats` (int64, set here, this chunk's damage): GAP lost sum
 * (mod 2^64), broken blocks' missing records, occurrences, first's block, next top-level slot
 * and its code, SPE records outside blocks, first slot, its code, undefined codes, first slot,
 * its code. */
enum { CAT_UNDEFINED = 0, CAT_PPE = 1, CAT_SPE = 2, CAT_BLOCK = 3, CAT_GAP = 4 };

static int check_spec(const Py_buffer *spec, Py_ssize_t item)
{
    const int64_t *f = (const int64_t *)spec->buf;
    Py_ssize_t nf = spec->len / (Py_ssize_t)(6 * sizeof(int64_t));
    for (Py_ssize_t k = 0; k < nf; k++) {
        const int64_t *g = f + 6 * k;
        if (g[0] < 0 || g[0] + g[1] > 32 || g[2] < 0 || g[2] + g[3] > item
            || (g[1] != 1 && g[1] != 2 && g[1] != 4 && g[1] != 8)
            || (g[3] != 1 && g[3] != 2 && g[3] != 4 && g[3] != 8))
            return 0;
    }
    return 1;
}

static inline void put_fields(unsigned char *d, const unsigned char *s, const int64_t *f,
                              Py_ssize_t nf)
{
    for (Py_ssize_t k = 0; k < nf; k++) {
        const int64_t *g = f + 6 * k;
        store(d + g[2], g[3], load(s + g[0], g[1], (int)g[4], (int)g[5]));
    }
}

static PyObject *frame(PyObject *self, PyObject *args)
{
    Py_buffer raw, table, out[4], spec[4], special, state, stats, next = {0}, end = {0};
    Py_ssize_t start, item[4];
    int swap;
    if (!PyArg_ParseTuple(args, "y*niy*w*ny*w*ny*w*ny*w*ny*y*w*w*|w*y*", &raw, &start, &swap,
                          &table, &out[0], &item[0], &spec[0], &out[1], &item[1], &spec[1],
                          &out[2], &item[2], &spec[2], &out[3], &item[3], &spec[3], &special,
                          &state, &stats, &next, &end))
        return NULL;
    PyObject *result = NULL;
    const int64_t *sp = (const int64_t *)special.buf;
    int64_t *st = (int64_t *)state.buf, *ds = (int64_t *)stats.buf;
    int64_t *nx = next.obj ? (int64_t *)next.buf : NULL;
    const int64_t *en = end.obj ? (const int64_t *)end.buf : NULL;
    Py_ssize_t cap[4], nf[4];
    if (table.len != 65536 || special.len != 10 * 8 || state.len < 8 * 8 || stats.len < 12 * 8
        || raw.len % 32 || (next.obj != NULL) != (end.obj != NULL)
        || (nx && (next.len != 65536 * 8 || end.len != 65536 * 8 || sp[2] < 0))) {
        PyErr_SetString(PyExc_ValueError, "frame: bad buffer sizes");
        goto done;
    }
    for (int k = 0; k < 4; k++) {
        if (item[k] <= 0 || !check_spec(&spec[k], item[k])) {
            PyErr_SetString(PyExc_ValueError, "frame: bad field");
            goto done;
        }
        cap[k] = out[k].len / item[k];
        nf[k] = spec[k].len / (Py_ssize_t)(6 * sizeof(int64_t));
    }
    {
        /* special offsets: each within its row and of its width (-1: not written) */
        static const int which[10] = {0, 1, 1, 1, 1, 2, 2, 3, 3, 3};
        static const int width[10] = {8, 8, 2, 2, 2, 8, 8, 8, 8, 2};
        for (int k = 0; k < 10; k++)
            if (sp[k] < -1 || (sp[k] >= 0 && sp[k] + width[k] > item[which[k]])
                || (sp[k] < 0 && (k == 2 || k == 3 || k == 4 || k == 6))) {
                PyErr_SetString(PyExc_ValueError, "frame: bad special offset");
                goto done;
            }
    }
    {
        const unsigned char *tb = (const unsigned char *)table.buf;
        const unsigned char *r = (const unsigned char *)raw.buf;
        unsigned char *po = out[0].buf, *bo = out[1].buf, *go = out[2].buf, *so = out[3].buf;
        const int64_t *pf = spec[0].buf, *bf = spec[1].buf, *gf = spec[2].buf,
                      *sf = spec[3].buf;
        int64_t carry_slot = st[0], carry_block = st[1];
        int64_t ip = st[2], ib = st[3], is = st[4], ig = st[5], unknown_inside = st[6];
        int64_t overflow = st[7];
        uint64_t lost = 0;
        int64_t br_missing = 0, br_occ = 0, br_block = -1, br_next = -1, br_code = -1;
        int64_t out_occ = 0, out_first = -1, out_code = -1;
        int64_t un_occ = 0, un_first = -1, un_code = -1;
        int64_t carry_count = 0;
        if (carry_block >= 0) {
            uint16_t c;
            if (carry_block >= cap[1]) goto range;
            memcpy(&c, bo + carry_block * item[1] + sp[3], 2);
            carry_count = c;
        }
        Py_ssize_t m = raw.len / 32;
        for (Py_ssize_t i = 0; i < m; i++, r += 32) {
            uint16_t code;
            memcpy(&code, r, 2);
            if (swap)
                code = __builtin_bswap16(code);
            int64_t slot = (int64_t)start + i;
            unsigned t = tb[code];
            int cat = t & 7;
            if (t & 16) {  /* top level */
                if (carry_block >= 0) {  /* settle the block before: does its count fit? */
                    int64_t room = slot - carry_slot - 1;
                    if (carry_count > room) {
                        if (br_occ == 0) {
                            br_block = carry_block;
                            br_next = slot;
                            br_code = code;
                        }
                        br_missing += carry_count - room;
                        br_occ++;
                    }
                }
                carry_block = -1;
                if (cat == CAT_PPE) {
                    if (ip >= cap[0]) goto range;
                    unsigned char *d = po + ip * item[0];
                    put_fields(d, r, pf, nf[0]);
                    if (sp[0] >= 0) memcpy(d + sp[0], &slot, 8);
                    ip++;
                } else if (cat == CAT_GAP) {
                    if (ig >= cap[2]) goto range;
                    unsigned char *d = go + ig * item[2];
                    put_fields(d, r, gf, nf[2]);
                    if (sp[5] >= 0) memcpy(d + sp[5], &slot, 8);
                    uint64_t l;
                    memcpy(&l, d + sp[6], 8);
                    lost += l;
                    ig++;
                } else if (cat == CAT_BLOCK) {
                    if (ib >= cap[1]) goto range;
                    unsigned char *d = bo + ib * item[1];
                    uint16_t zero = 0, c;
                    put_fields(d, r, bf, nf[1]);
                    if (sp[1] >= 0) memcpy(d + sp[1], &slot, 8);
                    memcpy(d + sp[4], &zero, 2);
                    memcpy(&c, d + sp[3], 2);
                    carry_count = c;
                    carry_block = ib++;
                } else if (cat == CAT_UNDEFINED) {
                    if (un_occ == 0) { un_first = slot; un_code = code; }
                    un_occ++;
                }
                carry_slot = slot;
            } else {
                int within = carry_block >= 0 && slot - carry_slot <= carry_count;
                if (cat == CAT_SPE) {
                    if (within) {
                        unsigned char *b = bo + carry_block * item[1];
                        int64_t row = is;
                        uint16_t n;
                        if (nx) {  /* grouped by context: the context's next row, if any */
                            uint16_t ctx;
                            memcpy(&ctx, b + sp[2], 2);
                            row = nx[ctx] < en[ctx] ? nx[ctx]++ : -1;
                            overflow += row < 0;
                        }
                        if (row >= 0) {
                            if (row >= cap[3]) goto range;
                            unsigned char *d = so + row * item[3];
                            put_fields(d, r, sf, nf[3]);
                            if (sp[7] >= 0) memcpy(d + sp[7], &slot, 8);
                            if (sp[8] >= 0) memcpy(d + sp[8], &carry_block, 8);
                            if (sp[9] >= 0) memcpy(d + sp[9], b + sp[2], 2);
                        }
                        memcpy(&n, b + sp[4], 2);
                        n++;
                        memcpy(b + sp[4], &n, 2);
                        is++;
                    } else {
                        if (out_occ == 0) { out_first = slot; out_code = code; }
                        out_occ++;
                    }
                } else if (cat == CAT_UNDEFINED) {
                    if (un_occ == 0) { un_first = slot; un_code = code; }
                    un_occ++;
                    unknown_inside += within;
                }
            }
        }
        st[0] = carry_slot; st[1] = carry_block;
        st[2] = ip; st[3] = ib; st[4] = is; st[5] = ig; st[6] = unknown_inside;
        st[7] = overflow;
        memcpy(&ds[0], &lost, 8);
        ds[1] = br_missing; ds[2] = br_occ; ds[3] = br_block; ds[4] = br_next; ds[5] = br_code;
        ds[6] = out_occ; ds[7] = out_first; ds[8] = out_code;
        ds[9] = un_occ; ds[10] = un_first; ds[11] = un_code;
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    range:
        PyErr_SetString(PyExc_IndexError, "frame: an output table is too small");
    }
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&table);
    for (int k = 0; k < 4; k++) {
        PyBuffer_Release(&out[k]);
        PyBuffer_Release(&spec[k]);
    }
    PyBuffer_Release(&special);
    PyBuffer_Release(&state);
    PyBuffer_Release(&stats);
    if (next.obj) PyBuffer_Release(&next);
    if (end.obj) PyBuffer_Release(&end);
    return result;
}

/* readings(spe, spe_item, spe_off, rec_idx, blk, blk_item, blk_off, blk_idx, write_code,
 *          raw, is_rec, which, write_new, reading_block, head_slot):
 * one SPE context's clock readings in program order (decode.py): its records (rows
 * `rec_idx` of the SPE table `spe`, ascending slots) merged with its blocks' headers (rows
 * `blk_idx` of the block table `blk`, each read after its block's records: sort key
 * 2 * slot for a record, 2 * (header slot + present) + 1 for a header). `spe_off`: int64
 * offsets of slot (int64), decr (uint32), code (uint16), b (uint64), block (int64) in an SPE
 * row; `blk_off`: of slot (int64), present (uint16), decr (uint32) in a block row. Per
 * reading: raw (its decrementer, int64), is_rec (uint8), which (its row, int64), write_new
 * (the low 32 bits of b of a record of code `write_code`, else -1), reading_block (its
 * block) and head_slot (that block's header slot). Returns False, writing nothing, when
 * either sequence's keys do not ascend (the caller sorts then). */
static PyObject *readings(PyObject *self, PyObject *args)
{
    Py_buffer spe, spe_off, rix, blk, blk_off, bix, o[6];
    Py_ssize_t spe_item, blk_item;
    long write_code;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*ny*y*lw*w*w*w*w*w*", &spe, &spe_item, &spe_off, &rix,
                          &blk, &blk_item, &blk_off, &bix, &write_code, &o[0], &o[1], &o[2],
                          &o[3], &o[4], &o[5]))
        return NULL;
    PyObject *result = NULL;
    const int64_t *so = spe_off.buf, *bo = blk_off.buf, *ri = rix.buf, *bi = bix.buf;
    Py_ssize_t n = rix.len / 8, m = bix.len / 8, t = n + m;
    Py_ssize_t spe_rows = spe_item > 0 ? spe.len / spe_item : 0;
    Py_ssize_t blk_rows = blk_item > 0 ? blk.len / blk_item : 0;
    static const int sw[5] = {8, 4, 2, 8, 8}, bw[3] = {8, 2, 4};
    if (spe_off.len != 5 * 8 || blk_off.len != 3 * 8 || spe_item <= 0 || blk_item <= 0
        || o[0].len != t * 8 || o[1].len != t || o[2].len != t * 8 || o[3].len != t * 8
        || o[4].len != t * 8 || o[5].len != t * 8) {
        PyErr_SetString(PyExc_ValueError, "readings: bad buffer sizes");
        goto done;
    }
    for (int k = 0; k < 5; k++)
        if (so[k] < 0 || so[k] + sw[k] > spe_item) {
            PyErr_SetString(PyExc_ValueError, "readings: bad offset");
            goto done;
        }
    for (int k = 0; k < 3; k++)
        if (bo[k] < 0 || bo[k] + bw[k] > blk_item) {
            PyErr_SetString(PyExc_ValueError, "readings: bad offset");
            goto done;
        }
    {
        const unsigned char *S = spe.buf, *B = blk.buf;
        int64_t *raw = o[0].buf, *which = o[2].buf, *wn = o[3].buf, *rb = o[4].buf,
                *hs = o[5].buf;
        uint8_t *isr = o[1].buf;
        int64_t prev = INT64_MIN;
        for (Py_ssize_t j = 0; j < n; j++) {
            int64_t slot;
            if (ri[j] < 0 || ri[j] >= spe_rows) goto range;
            memcpy(&slot, S + ri[j] * spe_item + so[0], 8);
            if (j && slot <= prev) goto unsorted;
            prev = slot;
        }
        prev = INT64_MIN;
        for (Py_ssize_t k = 0; k < m; k++) {
            int64_t slot;
            uint16_t present;
            if (bi[k] < 0 || bi[k] >= blk_rows) goto range;
            memcpy(&slot, B + bi[k] * blk_item + bo[0], 8);
            memcpy(&present, B + bi[k] * blk_item + bo[1], 2);
            if (k && slot + present <= prev) goto unsorted;
            prev = slot + present;
        }
        Py_ssize_t j = 0, k = 0;
        for (Py_ssize_t i = 0; i < t; i++) {
            int take_rec;
            int64_t rslot = 0, hslot = 0;
            uint16_t present = 0;
            const unsigned char *r = NULL, *h = NULL;
            if (j < n) {
                r = S + ri[j] * spe_item;
                memcpy(&rslot, r + so[0], 8);
            }
            if (k < m) {
                h = B + bi[k] * blk_item;
                memcpy(&hslot, h + bo[0], 8);
                memcpy(&present, h + bo[1], 2);
            }
            /* keys 2 * rslot and 2 * (hslot + present) + 1 never tie */
            take_rec = j < n && (k >= m || rslot <= hslot + present);
            if (take_rec) {
                uint32_t decr;
                uint16_t code;
                int64_t block, bslot;
                memcpy(&decr, r + so[1], 4);
                memcpy(&code, r + so[2], 2);
                memcpy(&block, r + so[4], 8);
                if (block < 0 || block >= blk_rows) goto range;
                raw[i] = decr;
                isr[i] = 1;
                which[i] = ri[j];
                if (code == write_code) {
                    uint64_t b;
                    memcpy(&b, r + so[3], 8);
                    wn[i] = (int64_t)(b & 0xFFFFFFFFu);
                } else {
                    wn[i] = -1;
                }
                rb[i] = block;
                memcpy(&bslot, B + block * blk_item + bo[0], 8);
                hs[i] = bslot;
                j++;
            } else {
                uint32_t decr;
                memcpy(&decr, h + bo[2], 4);
                raw[i] = decr;
                isr[i] = 0;
                which[i] = bi[k];
                wn[i] = -1;
                rb[i] = bi[k];
                hs[i] = hslot;
                k++;
            }
        }
        Py_INCREF(Py_True);
        result = Py_True;
        goto done;
    unsorted:
        Py_INCREF(Py_False);
        result = Py_False;
        goto done;
    range:
        PyErr_SetString(PyExc_IndexError, "readings: row out of range");
    }
done:
    PyBuffer_Release(&spe);
    PyBuffer_Release(&spe_off);
    PyBuffer_Release(&rix);
    PyBuffer_Release(&blk);
    PyBuffer_Release(&blk_off);
    PyBuffer_Release(&bix);
    for (int k = 0; k < 6; k++)
        PyBuffer_Release(&o[k]);
    return result;
}

/* unwrap(raw, cum): one SPE context's decrementer readings (`raw`, int64 values 0 .. 2^32 - 1,
 * in program order) unwrapped: `cum[i]` (int64, written) is the sum of the steps
 * (raw[j - 1] - raw[j]) mod 2^32 for j <= i (cum[0] = 0), as intervals.split_intervals'
 * numpy does. Returns how many steps are 2^31 or more (their readings may hide a wrap). */
static PyObject *unwrap(PyObject *self, PyObject *args)
{
    Py_buffer raw, cum;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*", &raw, &cum))
        return NULL;
    Py_ssize_t n = raw.len / 8;
    if (raw.len % 8 || cum.len != raw.len) {
        PyBuffer_Release(&raw);
        PyBuffer_Release(&cum);
        PyErr_SetString(PyExc_ValueError, "unwrap: raw and cum must be int64 of one length");
        return NULL;
    }
    const int64_t *r = raw.buf;
    int64_t *c = cum.buf;
    int64_t big = 0, total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t step = i ? (int64_t)((uint64_t)(r[i - 1] - r[i]) & 0xFFFFFFFFu) : 0;
        big += step >= ((int64_t)1 << 31);
        total += step;
        c[i] = total;
    }
    PyBuffer_Release(&raw);
    PyBuffer_Release(&cum);
    return PyLong_FromLongLong(big);
}

/* run_locals(raw, cum, interval, local): per reading, its local time within its run of equal
 * `interval` (int32, one run per live interval, in program order): local[i] (int64, written)
 * = -raw[f] + (cum[i] - cum[f]), f the run's first reading (intervals.split_intervals). */
static PyObject *run_locals(PyObject *self, PyObject *args)
{
    Py_buffer raw, cum, interval, local;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &raw, &cum, &interval, &local))
        return NULL;
    Py_ssize_t n = raw.len / 8;
    PyObject *result = NULL;
    if (raw.len % 8 || cum.len != raw.len || local.len != raw.len || interval.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "run_locals: arrays of different lengths");
        goto done;
    }
    {
        const int64_t *r = raw.buf, *c = cum.buf;
        const int32_t *k = interval.buf;
        int64_t *out = local.buf;
        Py_ssize_t f = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && k[i] != k[i - 1])
                f = i;
            out[i] = -r[f] + (c[i] - c[f]);
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&cum);
    PyBuffer_Release(&interval);
    PyBuffer_Release(&local);
    return result;
}

/* wrap_room(raw, interval, block, pos, span, slack, trusted, broken, lost_before, out):
 * decode._wrap_candidates' per-reading rule in one pass. Per reading (program order): `raw`
 * (int64 decrementer), `interval` (int32), `block` (int64, its block row; `pos[block]` its
 * window). Per window: `span` (float64, hi - lo, may be inf), `broken` and `lost_before`
 * (uint8). A run is a stretch of readings of one window and one interval; its steps' sum is
 * `apparent`; out[i] (uint8, written) = the run has room for a hidden wrap
 * (span + slack >= apparent + 2^32, in float64 as numpy does) and reading i is not its
 * interval's first; with `trusted`, also (its step >= 2^31, or its window is broken, or it
 * is its window's first reading and records were lost before the window). */
static PyObject *wrap_room(PyObject *self, PyObject *args)
{
    Py_buffer raw, interval, block, pos, span, broken, lost, out;
    double slack;
    int trusted;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*dpy*y*w*", &raw, &interval, &block, &pos, &span,
                          &slack, &trusted, &broken, &lost, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = raw.len / 8, n_pos = pos.len / 8, n_win = span.len / 8;
    if (raw.len % 8 || interval.len != n * 4 || block.len != n * 8 || out.len != n
        || broken.len != n_win || lost.len != n_win) {
        PyErr_SetString(PyExc_ValueError, "wrap_room: arrays of different lengths");
        goto done;
    }
    {
        const int64_t *r = raw.buf, *b = block.buf, *ps = pos.buf;
        const int32_t *k = interval.buf;
        const double *sp = span.buf;
        const uint8_t *br = broken.buf, *lb = lost.buf;
        uint8_t *o = out.buf;
        const int64_t mask = 0xFFFFFFFF, half = (int64_t)1 << 31;
        Py_ssize_t run = 0;
        int64_t apparent = 0, prev_win = -1;
        for (Py_ssize_t i = 0; i <= n; i++) {
            int64_t w = -1;
            int same = 0, start = 1;
            if (i < n) {
                if (b[i] < 0 || b[i] >= n_pos || ps[b[i]] < 0 || ps[b[i]] >= n_win) {
                    PyErr_SetString(PyExc_IndexError, "wrap_room: block out of range");
                    goto done;
                }
                w = ps[b[i]];
                same = i > 0 && k[i] == k[i - 1];
                start = i == 0 || w != prev_win || !same;
            }
            if (start && i > 0) {  /* the run run .. i - 1 ends: its room */
                int64_t rw = ps[b[run]];
                int room = sp[rw] + slack >= (double)apparent + 4294967296.0;
                for (Py_ssize_t j = run; j < i; j++) {
                    int same_j = j > 0 && k[j] == k[j - 1];
                    int v = room && same_j;
                    if (v && trusted) {
                        int64_t wj = ps[b[j]];
                        int64_t step = (int64_t)((uint64_t)(r[j - 1] - r[j]) & (uint64_t)mask);
                        int first_of_win = wj != ps[b[j - 1]];
                        v = step >= half || br[wj] || (first_of_win && lb[wj]);
                    }
                    o[j] = (uint8_t)v;
                }
            }
            if (i == n)
                break;
            if (start) {
                run = i;
                apparent = 0;
            }
            if (same)
                apparent += (int64_t)((uint64_t)(r[i - 1] - r[i]) & (uint64_t)mask);
            prev_win = w;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&interval);
    PyBuffer_Release(&block);
    PyBuffer_Release(&pos);
    PyBuffer_Release(&span);
    PyBuffer_Release(&broken);
    PyBuffer_Release(&lost);
    PyBuffer_Release(&out);
    return result;
}

/* place_readings(rows, item, offsets, loc, is_rec, reading_block, which, interval, local,
 *                dom0, block_anchor, anchor_pos, anchor_domain, anchor_local):
 * one SPE context's decoded readings (program order) to their places (decode.py): the k-th
 * record reading (`is_rec`, uint8) fills row k of `rows` (the context's record rows, `item`
 * bytes each; `offsets`: int64 byte offsets of loc (uint32), anchor (int64), domain (int32)
 * and local (int64)) with `loc`, its block's anchor (`block_anchor[reading_block]`), its
 * domain `dom0 + interval` and `local`; a block header's reading (row `which` of the block
 * table) fills its anchor `anchor_pos[which]` of `anchor_domain` (int32) and
 * `anchor_local` (int64). */
static PyObject *place_readings(PyObject *self, PyObject *args)
{
    Py_buffer rows, offsets, is_rec, rblock, which, interval, local, banchor, apos, adom, aloc;
    Py_ssize_t item;
    long long loc, dom0;
    (void)self;
    if (!PyArg_ParseTuple(args, "w*ny*Ly*y*y*y*y*Ly*y*w*w*", &rows, &item, &offsets, &loc,
                          &is_rec, &rblock, &which, &interval, &local, &dom0, &banchor, &apos,
                          &adom, &aloc))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = is_rec.len, n_rows = item > 0 ? rows.len / item : -1;
    Py_ssize_t n_blocks = banchor.len / 8, n_pos = apos.len / 8, n_anchor = aloc.len / 8;
    const int64_t *off = offsets.buf;
    if (item <= 0 || rows.len % item || offsets.len != 4 * 8 || rblock.len != n * 8
        || which.len != n * 8 || interval.len != n * 4 || local.len != n * 8
        || adom.len != n_anchor * 4) {
        PyErr_SetString(PyExc_ValueError, "place_readings: arrays of different lengths");
        goto done;
    }
    if (off[0] < 0 || off[0] + 4 > item || off[1] < 0 || off[1] + 8 > item || off[2] < 0
        || off[2] + 4 > item || off[3] < 0 || off[3] + 8 > item) {
        PyErr_SetString(PyExc_ValueError, "place_readings: bad field offset");
        goto done;
    }
    {
        unsigned char *rb = rows.buf;
        const uint8_t *isr = is_rec.buf;
        const int64_t *blk = rblock.buf, *wh = which.buf, *lc = local.buf, *ba = banchor.buf;
        const int64_t *ap = apos.buf;
        const int32_t *k = interval.buf;
        int32_t *ad = adom.buf;
        int64_t *al = aloc.buf;
        uint32_t loc32 = (uint32_t)loc;
        Py_ssize_t row = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t dom = (int32_t)(dom0 + k[i]);
            if (isr[i]) {
                if (row >= n_rows || blk[i] < 0 || blk[i] >= n_blocks) {
                    PyErr_SetString(PyExc_IndexError, "place_readings: record out of range");
                    goto done;
                }
                unsigned char *d = rb + row * item;
                memcpy(d + off[0], &loc32, 4);
                memcpy(d + off[1], &ba[blk[i]], 8);
                memcpy(d + off[2], &dom, 4);
                memcpy(d + off[3], &lc[i], 8);
                row++;
            } else {
                if (wh[i] < 0 || wh[i] >= n_pos || ap[wh[i]] < 0 || ap[wh[i]] >= n_anchor) {
                    PyErr_SetString(PyExc_IndexError, "place_readings: header out of range");
                    goto done;
                }
                ad[ap[wh[i]]] = dom;
                al[ap[wh[i]]] = lc[i];
            }
        }
        if (row != n_rows) {
            PyErr_SetString(PyExc_ValueError, "place_readings: not one reading per row");
            goto done;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&rows);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&is_rec);
    PyBuffer_Release(&rblock);
    PyBuffer_Release(&which);
    PyBuffer_Release(&interval);
    PyBuffer_Release(&local);
    PyBuffer_Release(&banchor);
    PyBuffer_Release(&apos);
    PyBuffer_Release(&adom);
    PyBuffer_Release(&aloc);
    return result;
}

/* split_live(raw, cum, write_new, stop, start, before, has_before, interval, kind, ref):
 * intervals.split_intervals' walk over one context's readings in program order (the Python
 * loop there is its twin and says what it does): readings up to each DECR_WRITE and each
 * switch's STOP (the first pass of the STOP value after the last reading certainly before
 * it, `before`, when `has_before`; else after the interval's start value) share an interval.
 * In: `raw`, `cum` (unwrap's), `write_new` (int64 per reading, -1: no DECR_WRITE), `stop`,
 * `start` (int64 per switch), `before` (int64 per switch). Out: `interval` (int32 per
 * reading), and per interval after the first what started it: `kind` (int8: 1 switch,
 * 2 write) and `ref` (int64: the switch's index, the write's reading), room for one per
 * switch and write. Returns the number of intervals. Values are below 2^32, sums of steps
 * below 2^63: the same integers as Python's. */
static inline int64_t mod32(int64_t v)
{
    int64_t m = v % ((int64_t)1 << 32);
    return m < 0 ? m + ((int64_t)1 << 32) : m;
}

/* the first index in [lo, hi) whose cum exceeds `limit` (cum is non-decreasing) */
static inline Py_ssize_t upper(const int64_t *cum, Py_ssize_t lo, Py_ssize_t hi, int64_t limit)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (cum[mid] <= limit)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static PyObject *split_live(PyObject *self, PyObject *args)
{
    Py_buffer raw, cum, wnew, stop, start, before, interval, kind, ref;
    int has_before;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*pw*w*w*", &raw, &cum, &wnew, &stop, &start,
                          &before, &has_before, &interval, &kind, &ref))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = raw.len / 8, n_sw = stop.len / 8;
    Py_ssize_t room = ref.len / 8;
    if (raw.len % 8 || cum.len != raw.len || wnew.len != raw.len || start.len != stop.len
        || (has_before && before.len != stop.len) || interval.len != n * 4
        || kind.len != room) {
        PyErr_SetString(PyExc_ValueError, "split_live: arrays of different lengths");
        goto done;
    }
    {
        const int64_t *r = raw.buf, *c = cum.buf, *w = wnew.buf, *sv = stop.buf, *st = start.buf;
        const int64_t *bf = before.buf;
        int32_t *iv = interval.buf;
        int8_t *kd = kind.buf;
        int64_t *rf = ref.buf;
        int64_t k = 0, p = n ? r[0] : 0;
        Py_ssize_t s = 0, i0 = 0, wp = 0, m = 0;
        /* the next DECR_WRITE at or after a reading: scanned forward as i0 only grows */
        while (i0 < n) {
            while (wp < n && (w[wp] < 0 || wp < i0))
                wp++;
            Py_ssize_t seg_end = wp < n ? wp : n - 1;
            Py_ssize_t j = seg_end + 1;
            if (s < n_sw) {
                int64_t stp = sv[s];
                int64_t known = has_before ? bf[s] : 0;
                int64_t rr = (known < (int64_t)seg_end + 1 ? known : (int64_t)seg_end + 1) - 1;
                if (rr >= i0) {
                    int64_t limit = c[rr] + mod32(r[rr] - stp);
                    j = upper(c, i0, seg_end + 1, limit);
                } else {
                    int64_t d_stop = mod32(p - stp), base = mod32(p - r[i0]);
                    int64_t limit = d_stop - base + c[i0];
                    j = upper(c, i0, seg_end + 1, limit);
                    if (base > d_stop)
                        j = i0;
                }
            }
            if (j <= seg_end) {
                for (Py_ssize_t i = i0; i < j; i++)
                    iv[i] = (int32_t)k;
                k++;
                if (m >= room)
                    goto full;
                kd[m] = 1;
                rf[m++] = s;
                p = st[s];
                s++;
                i0 = j;
                continue;
            }
            for (Py_ssize_t i = i0; i <= seg_end; i++)
                iv[i] = (int32_t)k;
            i0 = seg_end + 1;
            if (w[seg_end] >= 0) {
                k++;
                if (m >= room)
                    goto full;
                kd[m] = 2;
                rf[m++] = seg_end;
                p = w[seg_end];
            }
        }
        while (s < n_sw) { /* switches after the last reading: empty intervals */
            k++;
            if (m >= room)
                goto full;
            kd[m] = 1;
            rf[m++] = s++;
        }
        result = PyLong_FromLongLong(k + 1);
        goto done;
    full:
        PyErr_SetString(PyExc_ValueError, "split_live: kind and ref have too little room");
    }
done:
    PyBuffer_Release(&raw);
    PyBuffer_Release(&cum);
    PyBuffer_Release(&wnew);
    PyBuffer_Release(&stop);
    PyBuffer_Release(&start);
    PyBuffer_Release(&before);
    PyBuffer_Release(&interval);
    PyBuffer_Release(&kind);
    PyBuffer_Release(&ref);
    return result;
}

static PyMethodDef methods[] = {
    {"place_readings", place_readings, METH_VARARGS,
     "place_readings(rows, item, offsets, loc, ..., anchor_local): one context's decoded "
     "readings into its record rows and its headers' anchors"},
    {"wrap_room", wrap_room, METH_VARARGS,
     "wrap_room(raw, interval, block, pos, span, slack, trusted, broken, lost_before, out): "
     "may the step before each reading hide a wrap"},
    {"split_live", split_live, METH_VARARGS,
     "split_live(raw, cum, write_new, stop, start, before, has_before, interval, kind, ref): "
     "one context's readings into live intervals; the number of intervals"},
    {"unwrap", unwrap, METH_VARARGS,
     "unwrap(raw, cum): decrementer readings unwrapped; the count of steps of 2^31 or more"},
    {"run_locals", run_locals, METH_VARARGS,
     "run_locals(raw, cum, interval, local): each reading's local time within its run"},
    {"readings", readings, METH_VARARGS,
     "readings(spe, ..., head_slot): one SPE context's clock readings in program order"},
    {"frame", frame, METH_VARARGS,
     "frame(raw, start, swap, table, ppe, ..., special, state, stats): frame one chunk of "
     "slots into the reader's tables"},
    {"dma_complete", dma_complete, METH_VARARGS,
     "dma_complete(issue, tag, waits, status, epoch, out): each DMA command's completing "
     "tag wait, or -1"},
    {"gather", gather, METH_VARARGS,
     "gather(dst, dst_itemsize, src, src_itemsize, idx, fields): fields of src rows idx "
     "into consecutive dst rows"},
    {"time_bounds", time_bounds, METH_VARARGS,
     "time_bounds(rec, itemsize, code_off, domain_off, time_off, usable, first, last, span): "
     "least and greatest time of the written records per domain and over all"},
    {"group16", group16, METH_VARARGS,
     "group16(keys, stride, offset, order, start): row indexes grouped by a 16-bit key "
     "(a stable counting sort)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decodeloops",
    "Per-record loops of reading and decoding (cell_otf2/native/record_loops.py binds them).", -1, methods,
};

PyMODINIT_FUNC PyInit__decodeloops(void)
{
    return PyModule_Create(&module);
}
