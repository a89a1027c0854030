/* The report's per-event read-back callbacks in C: the OTF2 global event reader
 * calls these instead of Python functions, and each appends its event's numbers to column
 * buffers (numpy arrays handed in by `buffers`); report/load.py takes them batch by batch
 * (`take`) and does everything else on arrays. What each column holds per event kind is
 * exactly what load._PyEvents records through the Python callbacks, so both give the same
 * arrays. `chan_assign` numbers the message and RMA pairing keys of a batch (load._Chan) with a
 * hash table instead of a Python dict, with the same channel ids and sequence numbers;
 * `regions` walks a batch's Enter and Leave events over per-location stacks and updates the
 * exact per-region sums (load._Events), with the same numbers as the Python walk; `spread`
 * spreads DMA commands' bytes over a figure's columns (report/dma.py) in one pass.
 *
 * Built by setuptools at install time (setup.py, optional: where native.helper does not give
 * it, load.py keeps its Python callbacks). It does not link against OTF2: `install` receives the addresses of the
 * library's OTF2_GlobalEvtReaderCallbacks_Set*Callback functions (fetched by ctypes from the
 * library the `otf2` bindings loaded) and the callbacks object to set them on. Prototypes as
 * OTF2's OTF2_GlobalEvtReaderCallbacks.h declares them (the same as the bindings' ctypes
 * declarations in _otf2/GlobalEvtReaderCallbacks.py). One reader at a time per process.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int OTF2_CallbackCode;
typedef int OTF2_ErrorCode;
typedef uint64_t OTF2_LocationRef;
typedef uint64_t OTF2_TimeStamp;
typedef struct OTF2_AttributeList_struct OTF2_AttributeList;
typedef struct OTF2_GlobalEvtReaderCallbacks_struct OTF2_GlobalEvtReaderCallbacks;
#define HEAD OTF2_LocationRef loc, OTF2_TimeStamp t, void *user, OTF2_AttributeList *attrs
#define CALLBACK_SUCCESS 0
#define CALLBACK_INTERRUPT 1

typedef OTF2_ErrorCode (*setter_fn)(OTF2_GlobalEvtReaderCallbacks *, void *);

/* report.load.K */
enum { ENTER = 1, LEAVE, SEND, RECV, GET, PUT, RMA_DONE, COLL_BEGIN, COLL_END, METRIC, OTHER,
       N_KINDS };

/* the columns (load.RAW_COLUMNS): kind u1, loc i4, time i8, ref i8, peer i8, nbytes u8,
 * match u8 */
#define N_COLUMNS 7
static Py_buffer views[N_COLUMNS];
static int have_views;
static uint8_t *c_kind;
static int32_t *c_loc;
static int64_t *c_time, *c_ref, *c_peer;
static uint64_t *c_nbytes, *c_match;
static Py_ssize_t capacity, count;
static int overflow;

static inline OTF2_CallbackCode put(uint8_t kind, OTF2_LocationRef loc, OTF2_TimeStamp t,
                                    int64_t ref, int64_t peer, uint64_t nbytes,
                                    uint64_t match)
{
    if (count >= capacity) {
        overflow = 1;
        return CALLBACK_INTERRUPT;
    }
    const Py_ssize_t i = count++;
    c_kind[i] = kind;
    c_loc[i] = (int32_t)loc;
    c_time[i] = (int64_t)t;
    c_ref[i] = ref;
    c_peer[i] = peer;
    c_nbytes[i] = nbytes;
    c_match[i] = match;
    return CALLBACK_SUCCESS;
}

static OTF2_CallbackCode on_enter(HEAD, uint32_t region)
{
    (void)user, (void)attrs;
    return put(ENTER, loc, t, region, 0, 0, 0);
}

static OTF2_CallbackCode on_leave(HEAD, uint32_t region)
{
    (void)user, (void)attrs;
    return put(LEAVE, loc, t, region, 0, 0, 0);
}

static OTF2_CallbackCode on_send(HEAD, uint32_t receiver, uint32_t comm, uint32_t tag,
                                 uint64_t length)
{
    (void)user, (void)attrs;
    return put(SEND, loc, t, comm, receiver, length, tag);
}

static OTF2_CallbackCode on_isend(HEAD, uint32_t receiver, uint32_t comm, uint32_t tag,
                                  uint64_t length, uint64_t request)
{
    (void)request;
    return on_send(loc, t, user, attrs, receiver, comm, tag, length);
}

static OTF2_CallbackCode on_recv(HEAD, uint32_t sender, uint32_t comm, uint32_t tag,
                                 uint64_t length)
{
    (void)user, (void)attrs;
    return put(RECV, loc, t, comm, sender, length, tag);
}

static OTF2_CallbackCode on_irecv(HEAD, uint32_t sender, uint32_t comm, uint32_t tag,
                                  uint64_t length, uint64_t request)
{
    (void)request;
    return on_recv(loc, t, user, attrs, sender, comm, tag, length);
}

static OTF2_CallbackCode on_get(HEAD, uint32_t win, uint32_t remote, uint64_t nbytes,
                                uint64_t matching)
{
    (void)user, (void)attrs;
    return put(GET, loc, t, win, remote, nbytes, matching);
}

static OTF2_CallbackCode on_put(HEAD, uint32_t win, uint32_t remote, uint64_t nbytes,
                                uint64_t matching)
{
    (void)user, (void)attrs;
    return put(PUT, loc, t, win, remote, nbytes, matching);
}

static OTF2_CallbackCode on_done(HEAD, uint32_t win, uint64_t matching)
{
    (void)user, (void)attrs;
    return put(RMA_DONE, loc, t, win, -1, 0, matching);
}

/* kinds recorded by location and time only. The reader calls them with the further
 * arguments of their event class; a C function that declares fewer parameters than its
 * caller passes ignores the rest on every ABI CPython runs on (the caller cleans up). */
static OTF2_CallbackCode on_coll_begin(HEAD)
{
    (void)user, (void)attrs;
    return put(COLL_BEGIN, loc, t, 0, 0, 0, 0);
}

static OTF2_CallbackCode on_coll_end(HEAD)
{
    (void)user, (void)attrs;
    return put(COLL_END, loc, t, 0, 0, 0, 0);
}

static OTF2_CallbackCode on_metric(HEAD)
{
    (void)user, (void)attrs;
    return put(METRIC, loc, t, 0, 0, 0, 0);
}

static OTF2_CallbackCode on_other(HEAD)
{
    (void)user, (void)attrs;
    return put(OTHER, loc, t, 0, 0, 0, 0);
}

/* callback per install code: the K kinds, and SEND + 100 / RECV + 100 for the variants with a
 * request id (MpiIsend, MpiIrecv) */
static void *callback_for(long code)
{
    switch (code) {
    case ENTER: return (void *)on_enter;
    case LEAVE: return (void *)on_leave;
    case SEND: return (void *)on_send;
    case SEND + 100: return (void *)on_isend;
    case RECV: return (void *)on_recv;
    case RECV + 100: return (void *)on_irecv;
    case GET: return (void *)on_get;
    case PUT: return (void *)on_put;
    case RMA_DONE: return (void *)on_done;
    case COLL_BEGIN: return (void *)on_coll_begin;
    case COLL_END: return (void *)on_coll_end;
    case METRIC: return (void *)on_metric;
    case OTHER: return (void *)on_other;
    default: return NULL;
    }
}

static PyObject *install(PyObject *self, PyObject *args)
{
    unsigned long long cbs_address;
    PyObject *setters;
    (void)self;
    if (!PyArg_ParseTuple(args, "KO", &cbs_address, &setters))
        return NULL;
    PyObject *seq = PySequence_Fast(setters, "setters must be a sequence of (address, code)");
    if (!seq)
        return NULL;
    OTF2_GlobalEvtReaderCallbacks *cbs = (OTF2_GlobalEvtReaderCallbacks *)(uintptr_t)cbs_address;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        unsigned long long address;
        long code;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "Kl", &address, &code))
            goto fail;
        void *fn = callback_for(code);
        if (!fn || !address || !cbs) {
            PyErr_Format(PyExc_ValueError, "no callback for code %ld or a NULL address", code);
            goto fail;
        }
        OTF2_ErrorCode err = ((setter_fn)(uintptr_t)address)(cbs, fn);
        if (err != 0) {
            PyErr_Format(PyExc_RuntimeError, "setting a callback failed: OTF2 error %d", err);
            goto fail;
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    return NULL;
}

static void release_views(void)
{
    if (have_views)
        for (int k = 0; k < N_COLUMNS; k++)
            PyBuffer_Release(&views[k]);
    have_views = 0;
    capacity = count = 0;
    overflow = 0;
}

static PyObject *set_buffers(PyObject *self, PyObject *args)
{
    static const Py_ssize_t sizes[N_COLUMNS] = {1, 4, 8, 8, 8, 8, 8};
    PyObject *cols[N_COLUMNS];
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4],
                          &cols[5], &cols[6]))
        return NULL;
    release_views();
    Py_buffer got[N_COLUMNS];
    Py_ssize_t n = -1;
    for (int k = 0; k < N_COLUMNS; k++) {
        if (PyObject_GetBuffer(cols[k], &got[k], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                                     | PyBUF_FORMAT) < 0) {
            for (int m = 0; m < k; m++)
                PyBuffer_Release(&got[m]);
            return NULL;
        }
        Py_ssize_t rows = got[k].itemsize ? got[k].len / got[k].itemsize : 0;
        if (got[k].itemsize != sizes[k] || (n >= 0 && rows != n)) {
            for (int m = 0; m <= k; m++)
                PyBuffer_Release(&got[m]);
            PyErr_SetString(PyExc_ValueError, "column buffers of the wrong item size or length");
            return NULL;
        }
        n = rows;
    }
    memcpy(views, got, sizeof got);
    have_views = 1;
    c_kind = views[0].buf;
    c_loc = views[1].buf;
    c_time = views[2].buf;
    c_ref = views[3].buf;
    c_peer = views[4].buf;
    c_nbytes = views[5].buf;
    c_match = views[6].buf;
    capacity = n;
    count = 0;
    overflow = 0;
    Py_RETURN_NONE;
}

static PyObject *take(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (overflow) {
        overflow = 0;
        count = 0;
        PyErr_SetString(PyExc_RuntimeError, "more events in one batch than the buffers hold");
        return NULL;
    }
    Py_ssize_t n = count;
    count = 0;
    return PyLong_FromSsize_t(n);
}

static PyObject *release(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    release_views();
    Py_RETURN_NONE;
}

/* Pairing keys (load._Chan, packed keys only): an open-addressing hash table of non-negative
 * int64 keys, held in an int32 array of channel id + 1 that Python allocates (0: empty, so a
 * fresh table is np.zeros; its size a power of two, never more than half full); a slot's key
 * is `by_id[id]`. `chan_assign` gives each key of a
 * batch its channel id (new keys the next ids, in order of first occurrence, their keys noted
 * in `by_id`) and each event its sequence number on its side of the channel (counts per side
 * in `n0`, `n1`), exactly as the Python dict of load._Chan does. */
/* keys hashed this far ahead have their slot fetched into the cache (no change in results) */
#define PREFETCH 16

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int32_t *slot_of(int32_t *table, Py_ssize_t mask, const int64_t *by_id, int64_t key)
{
    Py_ssize_t h = (Py_ssize_t)(mix((uint64_t)key) & (uint64_t)mask);
    while (table[h] != 0 && by_id[table[h] - 1] != key)
        h = (h + 1) & mask;
    return &table[h];
}

static void release_all(Py_buffer *got, int n)
{
    for (int k = 0; k < n; k++)
        PyBuffer_Release(&got[k]);
}

/* The writable C-contiguous buffers of objs[0 .. n-1], each of items of sizes[k] bytes;
 * 0 on success, -1 with an exception set (and nothing held) otherwise. */
static int get_buffers(PyObject **objs, Py_buffer *got, const Py_ssize_t *sizes, int n,
                       const char *what)
{
    for (int k = 0; k < n; k++) {
        if (PyObject_GetBuffer(objs[k], &got[k], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            release_all(got, k);
            return -1;
        }
        if (got[k].itemsize != sizes[k]) {
            release_all(got, k + 1);
            PyErr_SetString(PyExc_ValueError, what);
            return -1;
        }
    }
    return 0;
}

static PyObject *chan_assign(PyObject *self, PyObject *args)
{
    enum { TABLE, KEYS, SECOND, N0, N1, BY_ID, OUT_C, OUT_SEQ, N_ARGS };
    static const Py_ssize_t sizes[N_ARGS] = {4, 8, 1, 8, 8, 8, 8, 8};
    PyObject *objs[N_ARGS];
    Py_buffer got[N_ARGS];
    Py_ssize_t next;
    (void)self;
    memset(got, 0, sizeof got);
    if (!PyArg_ParseTuple(args, "OOOOOOOOn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &next))
        return NULL;
    if (get_buffers(objs, got, sizes, N_ARGS, "chan_assign: an array of the wrong item size")
        < 0)
        return NULL;
    int32_t *table = got[TABLE].buf;
    int64_t *keys = got[KEYS].buf, *n0 = got[N0].buf,
            *n1 = got[N1].buf, *by_id = got[BY_ID].buf, *out_c = got[OUT_C].buf,
            *out_seq = got[OUT_SEQ].buf;
    const uint8_t *second = got[SECOND].buf;
    const Py_ssize_t pairs = got[TABLE].len / 4, m = got[KEYS].len / 8;
    const Py_ssize_t room = got[BY_ID].len / 8;
    if (pairs & (pairs - 1) || got[SECOND].len != m || got[OUT_C].len / 8 != m
        || got[OUT_SEQ].len / 8 != m || next < 0 || next + m > room
        || got[N0].len / 8 < next + m || got[N1].len / 8 < next + m
        || 2 * (next + m) > pairs || next + m >= INT32_MAX) {
        release_all(got, N_ARGS);
        PyErr_SetString(PyExc_ValueError, "chan_assign: arrays too small for the batch");
        return NULL;
    }
    const Py_ssize_t mask = pairs - 1;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (i + PREFETCH < m)  /* the table is far larger than the caches: ask ahead */
            __builtin_prefetch(&table[mix((uint64_t)keys[i + PREFETCH]) & (uint64_t)mask], 1);
        const int64_t key = keys[i];
        int32_t *slot = slot_of(table, mask, by_id, key);
        int64_t c;
        if (*slot == 0) {
            c = next++;
            *slot = (int32_t)(c + 1);
            by_id[c] = key;
            n0[c] = n1[c] = 0;
        } else {
            c = *slot - 1;
        }
        out_c[i] = c;
        out_seq[i] = second[i] ? n1[c]++ : n0[c]++;
    }
    release_all(got, N_ARGS);
    return PyLong_FromSsize_t(next);
}

static PyObject *chan_rehash(PyObject *self, PyObject *args)
{
    PyObject *objs[2];
    Py_buffer got[2];
    (void)self;
    memset(got, 0, sizeof got);
    if (!PyArg_ParseTuple(args, "OO", &objs[0], &objs[1]))
        return NULL;
    static const Py_ssize_t sizes[2] = {4, 8};
    if (get_buffers(objs, got, sizes, 2, "chan_rehash: an int32 table and int64 keys") < 0)
        return NULL;
    int32_t *table = got[0].buf;
    const int64_t *by_id = got[1].buf;
    const Py_ssize_t pairs = got[0].len / 4, n = got[1].len / 8;
    if (pairs & (pairs - 1) || 2 * n > pairs || n >= INT32_MAX) {
        release_all(got, 2);
        PyErr_SetString(PyExc_ValueError, "chan_rehash: table too small");
        return NULL;
    }
    for (Py_ssize_t c = 0; c < n; c++) {  /* keys are distinct: each finds an empty slot */
        if (c + PREFETCH < n)
            __builtin_prefetch(&table[mix((uint64_t)by_id[c + PREFETCH]) & (uint64_t)(pairs - 1)],
                               1);
        *slot_of(table, pairs - 1, by_id, by_id[c]) = (int32_t)(c + 1);
    }
    release_all(got, 2);
    Py_RETURN_NONE;
}

/* `regions` walks the Enter and Leave events of a batch (events lo..hi-1 of the columns kind,
 * loc, time, ref) one at a time in the reader's order, as load._Events._regions_walk does:
 * each location's open regions are a stack (depth[x] entries at stack_reg / stack_t
 * [x * cap ...]: region and Enter time), a Leave closes its region and whatever was left open
 * inside it (a Leave of a region not open is a stray), and the exact sums (visits,
 * inclusive, longest, exclusive, outermost per location * n_reg + region; first, last, stray
 * per location) are updated. state[i] is the innermost open region of event i's location
 * after it (-1 none), for every event. Returns hi, or the position of an Enter that finds its
 * stack full (nothing of it done: Python gives the stacks more room and calls again from
 * there). ValueError, before anything changes, for a location or region out of range. */
static PyObject *regions(PyObject *self, PyObject *args)
{
    enum { KIND, LOC, TIME, REF, DEPTH, SREG, STIME, VISITS, INCL, LONGEST, EXCL, OUTER,
           FIRST, LAST, STRAY, STATE, N_ARGS };
    static const Py_ssize_t sizes[N_ARGS] = {1, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    PyObject *objs[N_ARGS];
    Py_buffer got[N_ARGS];
    Py_ssize_t lo, hi, n_reg, cap;
    (void)self;
    memset(got, 0, sizeof got);
    if (!PyArg_ParseTuple(args, "OOOOnnnnOOOOOOOOOOOO", &objs[KIND], &objs[LOC], &objs[TIME],
                          &objs[REF], &lo, &hi, &n_reg, &cap, &objs[DEPTH], &objs[SREG],
                          &objs[STIME], &objs[VISITS], &objs[INCL], &objs[LONGEST],
                          &objs[EXCL], &objs[OUTER], &objs[FIRST], &objs[LAST], &objs[STRAY],
                          &objs[STATE]))
        return NULL;
    if (get_buffers(objs, got, sizes, N_ARGS, "regions: an array of the wrong item size") < 0)
        return NULL;
    const uint8_t *kind = got[KIND].buf;
    const int32_t *loc = got[LOC].buf;
    const int64_t *time = got[TIME].buf, *ref = got[REF].buf;
    int64_t *depth = got[DEPTH].buf, *sreg = got[SREG].buf, *stime = got[STIME].buf,
            *visits = got[VISITS].buf, *incl = got[INCL].buf, *longest = got[LONGEST].buf,
            *excl = got[EXCL].buf, *outer = got[OUTER].buf, *first = got[FIRST].buf,
            *last = got[LAST].buf, *stray = got[STRAY].buf, *state = got[STATE].buf;
    const Py_ssize_t n = got[KIND].len, n_locs = got[DEPTH].len / 8;
    const char *bad = NULL;
    if (lo < 0 || hi > n || got[LOC].len / 4 < n || got[TIME].len / 8 < n
        || got[REF].len / 8 < n || got[STATE].len / 8 < n || cap < 1 || n_reg < 1
        || got[SREG].len / 8 != n_locs * cap || got[STIME].len / 8 != n_locs * cap
        || got[VISITS].len / 8 != n_locs * n_reg || got[INCL].len / 8 != n_locs * n_reg
        || got[LONGEST].len / 8 != n_locs * n_reg || got[EXCL].len / 8 != n_locs * n_reg
        || got[OUTER].len / 8 != n_locs * n_reg || got[FIRST].len / 8 != n_locs
        || got[LAST].len / 8 != n_locs || got[STRAY].len / 8 != n_locs)
        bad = "regions: arrays of the wrong sizes";
    for (Py_ssize_t i = lo; !bad && i < hi; i++) {
        if (kind[i] != ENTER && kind[i] != LEAVE)
            continue;
        if (loc[i] < 0 || loc[i] >= n_locs)
            bad = "an Enter or Leave of an undefined location";
        else if (ref[i] < 0 || ref[i] >= n_reg)
            bad = "an Enter or Leave of an undefined region";
    }
    if (bad) {
        release_all(got, N_ARGS);
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    Py_ssize_t i;
    for (i = lo; i < hi; i++) {
        const int32_t x = loc[i];
        const uint8_t k = kind[i];
        if (k != ENTER && k != LEAVE) {
            state[i] = (x >= 0 && x < n_locs && depth[x]) ? sreg[x * cap + depth[x] - 1] : -1;
            continue;
        }
        int64_t d = depth[x];
        if (k == ENTER && d == cap)
            break;
        int64_t *s = sreg + x * cap, *st = stime + x * cap;
        const int64_t r = ref[i], tq = time[i];
        if (d)
            excl[x * n_reg + s[d - 1]] += tq - last[x];
        else if (first[x] < 0)
            first[x] = tq;
        last[x] = tq;
        if (k == ENTER) {
            if (!d)
                outer[x * n_reg + r]++;
            s[d] = r;
            st[d] = tq;
            d++;
        } else {
            int64_t j = d - 1, t0 = -1;
            while (j >= 0 && s[j] != r)
                j--;
            if (j >= 0) {  /* closes what was left open inside it too */
                t0 = st[j];
                d = j;
            } else {
                stray[x]++;
            }
            if (t0 >= 0) {
                const Py_ssize_t c = x * n_reg + r;
                visits[c]++;
                incl[c] += tq - t0;
                if (tq - t0 > longest[c])
                    longest[c] = tq - t0;
            }
        }
        depth[x] = d;
        state[i] = d ? s[d - 1] : -1;
    }
    release_all(got, N_ARGS);
    return PyLong_FromSsize_t(i);
}

/* `spread` adds to out (n_rows x m, row-major) the bytes of each DMA command i spread evenly
 * over [t0[i], t1[i]] (t1 at least t0 + 1) into the m columns between edges (ascending),
 * on row[i] (-1: left out), as report/dma.spread_rows does with numpy: the first and last column get their
 * overlap, the columns between the rate times their width (through a running sum per row,
 * `step`: n_rows x (m + 1) zeros, a rounding residue below zero counts as none); commands
 * wholly outside the edges are left out. */
static Py_ssize_t column(const double *edges, Py_ssize_t m, double t, int right)
{
    /* clip(searchsorted(edges, t, side) - 1, 0, m - 1), from a guess on evenly spaced edges */
    const double lo = edges[0], span = edges[m] - edges[0];
    Py_ssize_t g = span > 0 ? (Py_ssize_t)((t - lo) / span * (double)m) : 0;
    if (!(g >= 0))
        g = 0;
    if (g > m - 1)
        g = m - 1;
    if (right) {
        while (g > 0 && edges[g] > t)
            g--;
        while (g < m - 1 && edges[g + 1] <= t)
            g++;
    } else {
        while (g > 0 && edges[g] >= t)
            g--;
        while (g < m - 1 && edges[g + 1] < t)
            g++;
    }
    return g;
}

static PyObject *spread(PyObject *self, PyObject *args)
{
    enum { ROW, T0, T1, NBYTES, EDGES, OUT, STEP, N_ARGS };
    PyObject *objs[N_ARGS];
    Py_buffer got[N_ARGS];
    (void)self;
    memset(got, 0, sizeof got);
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    static const Py_ssize_t sizes[N_ARGS] = {8, 8, 8, 8, 8, 8, 8};
    if (get_buffers(objs, got, sizes, N_ARGS, "spread: int64 rows and float64 arrays") < 0)
        return NULL;
    const int64_t *row = got[ROW].buf;
    const double *t0 = got[T0].buf, *t1 = got[T1].buf, *nbytes = got[NBYTES].buf,
                 *edges = got[EDGES].buf;
    double *out = got[OUT].buf, *step = got[STEP].buf;
    const Py_ssize_t n = got[ROW].len / 8, m = got[EDGES].len / 8 - 1;
    const Py_ssize_t n_rows = m > 0 ? got[OUT].len / 8 / m : 0;
    if (m < 1 || got[T0].len / 8 != n || got[T1].len / 8 != n || got[NBYTES].len / 8 != n
        || got[OUT].len / 8 != n_rows * m || got[STEP].len / 8 != n_rows * (m + 1)) {
        release_all(got, N_ARGS);
        PyErr_SetString(PyExc_ValueError, "spread: arrays of the wrong sizes");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const double a0 = t0[i];
        const double a1 = t1[i] > a0 + 1.0 ? t1[i] : a0 + 1.0;
        if (!(a1 > edges[0] && a0 < edges[m]) || row[i] < 0)
            continue;
        if (row[i] >= n_rows) {
            release_all(got, N_ARGS);
            PyErr_SetString(PyExc_ValueError, "spread: a row out of range");
            return NULL;
        }
        const double r = nbytes[i] / (a1 - a0);
        const Py_ssize_t a = column(edges, m, a0, 1), b = column(edges, m, a1, 0);
        double *o = out + row[i] * m;
        const double lo = a0 > edges[a] ? a0 : edges[a];
        o[a] += r * ((a1 < edges[a + 1] ? a1 : edges[a + 1]) - lo);
        if (b > a) {
            o[b] += r * ((a1 < edges[b + 1] ? a1 : edges[b + 1]) - edges[b]);
            step[row[i] * (m + 1) + a + 1] += r;
            step[row[i] * (m + 1) + b] -= r;
        }
    }
    for (Py_ssize_t k = 0; k < n_rows; k++) {
        double run = 0;
        for (Py_ssize_t c = 0; c < m; c++) {
            run += step[k * (m + 1) + c];
            const double v = run * (edges[c + 1] - edges[c]);
            out[k * m + c] += v > 0 ? v : 0;
        }
    }
    release_all(got, N_ARGS);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(callbacks_address, ((setter_address, code), ...)): set the C callbacks"},
    {"buffers", set_buffers, METH_VARARGS,
     "buffers(kind, loc, time, ref, peer, nbytes, match): the columns events go into"},
    {"take", take, METH_NOARGS, "take() -> events put into the columns since the last take"},
    {"release", release, METH_NOARGS, "release(): let go of the column buffers"},
    {"chan_assign", chan_assign, METH_VARARGS,
     "chan_assign(table, keys, second, n0, n1, by_id, chan, seq, ids) -> ids: channel ids and "
     "sequence numbers of a batch's packed keys (load._Chan)"},
    {"chan_rehash", chan_rehash, METH_VARARGS,
     "chan_rehash(table, by_id): put the keys of channels 0..n-1 into an empty table"},
    {"regions", regions, METH_VARARGS,
     "regions(kind, loc, time, ref, lo, hi, n_reg, cap, depth, stack_reg, stack_t, visits, "
     "inclusive, longest, exclusive, outermost, first, last, stray, state) -> position: the "
     "Enter/Leave walk of a batch (load._Events)"},
    {"spread", spread, METH_VARARGS,
     "spread(row, t0, t1, nbytes, edges, out, step): DMA bytes per row and column "
     "(report.dma.spread_rows)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_evtread",
    "The report's per-event read-back callbacks in C (cell_otf2.report.load).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__evtread(void)
{
    return PyModule_Create(&module);
}
