/* The report's per-event read-back callbacks in C (issue 18): the OTF2 global event reader
 * calls these instead of Python functions, and each appends its event's numbers to column
 * buffers (numpy arrays handed in by `buffers`); report/load.py takes them batch by batch
 * (`take`) and does everything else on arrays. What each column holds per event kind is
 * exactly what load._PyEvents records through the Python callbacks, so both give the same
 * arrays. `chan_assign` numbers the message and RMA pairing keys of a batch (load._Chan) with a
 * hash table instead of a Python dict, with the same channel ids and sequence numbers.
 *
 * Built by setuptools at install time (setup.py, optional: without it load.py keeps its Python
 * callbacks). It does not link against OTF2: `install` receives the addresses of the
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
    for (int k = 0; k < N_ARGS; k++) {
        if (PyObject_GetBuffer(objs[k], &got[k], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            release_all(got, k);
            return NULL;
        }
        if (got[k].itemsize != sizes[k]) {
            release_all(got, k + 1);
            PyErr_SetString(PyExc_ValueError, "chan_assign: an array of the wrong item size");
            return NULL;
        }
    }
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
    for (int k = 0; k < 2; k++) {
        if (PyObject_GetBuffer(objs[k], &got[k], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            release_all(got, k);
            return NULL;
        }
        if (got[k].itemsize != (k ? 8 : 4)) {
            release_all(got, k + 1);
            PyErr_SetString(PyExc_ValueError, "chan_rehash: an int32 table and int64 keys");
            return NULL;
        }
    }
    int32_t *table = got[0].buf;
    const int64_t *by_id = got[1].buf;
    const Py_ssize_t pairs = got[0].len / 4, n = got[1].len / 8;
    if (pairs & (pairs - 1) || 2 * n > pairs || n >= INT32_MAX) {
        release_all(got, 2);
        PyErr_SetString(PyExc_ValueError, "chan_rehash: table too small");
        return NULL;
    }
    for (Py_ssize_t c = 0; c < n; c++)  /* keys are distinct: each finds an empty slot */
        *slot_of(table, pairs - 1, by_id, by_id[c]) = (int32_t)(c + 1);
    release_all(got, 2);
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
