/* The event writer's per-event loop in C: one location's EVENT_DTYPE rows in, the
 * OTF2 C calls made in a loop, the first non-zero OTF2 error code out; and the writer's input
 * checks of a table in one pass (`check`).
 *
 * Built by setuptools at install time (setup.py, optional: where native.helper does not give
 * it, the writer keeps its ctypes path, writer/events.py). It does not link against OTF2: `bind` receives the
 * addresses of the OTF2 functions from the library the `otf2` bindings already loaded
 * (fetched by ctypes), together with the row layout, the attribute refs and the OTF2 type id
 * of uint64_t. The calls, their order and their arguments are exactly those of
 * writer.events._write_location_events / add_other_event_writers, so both paths write the
 * same bytes. The GIL stays held: OTF2 calls back into Python for its flush and error
 * callbacks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* OTF2's types, as its headers declare them (OTF2_GeneralDefinitions.h, OTF2_Events.h) */
typedef int OTF2_ErrorCode;
typedef uint64_t OTF2_TimeStamp;
typedef uint8_t OTF2_Type;
typedef union { int64_t signed_int; uint64_t unsigned_int; double floating_point; }
    OTF2_MetricValue;
typedef struct OTF2_EvtWriter_struct OTF2_EvtWriter;
typedef struct OTF2_AttributeList_struct OTF2_AttributeList;
#define EW OTF2_EvtWriter *, OTF2_AttributeList *, OTF2_TimeStamp

typedef OTF2_ErrorCode (*region_fn)(EW, uint32_t);
typedef OTF2_ErrorCode (*p2p_fn)(EW, uint32_t, uint32_t, uint32_t, uint64_t);
typedef OTF2_ErrorCode (*ip2p_fn)(EW, uint32_t, uint32_t, uint32_t, uint64_t, uint64_t);
typedef OTF2_ErrorCode (*request_fn)(EW, uint64_t);
typedef OTF2_ErrorCode (*coll_begin_fn)(EW);
typedef OTF2_ErrorCode (*coll_end_fn)(EW, uint8_t, uint32_t, uint32_t, uint64_t, uint64_t);
typedef OTF2_ErrorCode (*rma_fn)(EW, uint32_t, uint32_t, uint64_t, uint64_t);
typedef OTF2_ErrorCode (*rma_complete_fn)(EW, uint32_t, uint64_t);
typedef OTF2_ErrorCode (*metric_fn)(EW, uint32_t, uint8_t, const OTF2_Type *,
                                    const OTF2_MetricValue *);
typedef OTF2_ErrorCode (*attr_u64_fn)(OTF2_AttributeList *, uint32_t, uint64_t);
typedef OTF2_ErrorCode (*program_begin_fn)(EW, uint32_t, uint32_t, const uint32_t *);
typedef OTF2_ErrorCode (*program_end_fn)(EW, int64_t);

/* model.Ev */
enum {
    ENTER = 1, LEAVE, MPI_SEND, MPI_RECV, MPI_ISEND, MPI_ISEND_COMPLETE, MPI_IRECV_REQUEST,
    MPI_IRECV, MPI_COLL_BEGIN, MPI_COLL_END, RMA_GET, RMA_PUT, RMA_OP_COMPLETE_BLOCKING,
    METRIC, ENTER_OFF_SPU, RMA_WIN_CREATE, RMA_WIN_DESTROY, PROGRAM_BEGIN, PROGRAM_END,
    MAX_TYPE = PROGRAM_END
};

/* the function table, in the order `bind` takes the addresses (writer.capi._C_FUNCTIONS) */
static struct {
    region_fn enter, leave;
    p2p_fn mpi_send, mpi_recv;
    ip2p_fn mpi_isend, mpi_irecv;
    request_fn mpi_isend_complete, mpi_irecv_request;
    coll_begin_fn mpi_coll_begin;
    coll_end_fn mpi_coll_end;
    rma_fn rma_get, rma_put;
    rma_complete_fn rma_complete;
    metric_fn metric;
    attr_u64_fn attr_add_u64;
    region_fn rma_win_create, rma_win_destroy; /* (writer, attributes, time, window) */
    program_begin_fn program_begin; /* (..., program name, 0 arguments, NULL) */
    program_end_fn program_end;     /* (..., exit status) */
} api;
#define N_FUNCTIONS 19
/* model.PROGRAM_NAME_STRING; OTF2_UNDEFINED_INT64: the exit status is not traced */
#define PROGRAM_NAME_STRING 1
#define UNDEFINED_INT64 INT64_MIN

/* row layout: itemsize and byte offsets of loc (u4), type (u1), ref (u4), time (i8),
 * p1..p6 (u8) */
static Py_ssize_t itemsize;
static Py_ssize_t off_loc, off_type, off_ref, off_time, off_p[7];
/* attribute refs: DMA tag, MFC opcode, list elements, EA, LS address, physical SPU */
static uint32_t attr_tag, attr_opcode, attr_elements, attr_ea, attr_ls, attr_spu;
static OTF2_Type metric_types[1];
static int bound;

static inline uint64_t u64_at(const char *row, Py_ssize_t off)
{
    uint64_t v;
    memcpy(&v, row + off, sizeof v);
    return v;
}

static inline uint32_t u32_at(const char *row, Py_ssize_t off)
{
    uint32_t v;
    memcpy(&v, row + off, sizeof v);
    return v;
}

static PyObject *bind_api(PyObject *self, PyObject *args)
{
    PyObject *addresses;
    Py_ssize_t layout[11];
    unsigned int attrs[6], uint64_type;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!(nnnnnnnnnnn)(IIIIII)I", &PyTuple_Type, &addresses,
                          &layout[0], &layout[1], &layout[2], &layout[3], &layout[4],
                          &layout[5], &layout[6], &layout[7], &layout[8], &layout[9],
                          &layout[10],
                          &attrs[0], &attrs[1], &attrs[2], &attrs[3], &attrs[4], &attrs[5],
                          &uint64_type))
        return NULL;
    if (PyTuple_GET_SIZE(addresses) != N_FUNCTIONS) {
        PyErr_Format(PyExc_ValueError, "bind: %d function addresses expected", N_FUNCTIONS);
        return NULL;
    }
    void *table[N_FUNCTIONS];
    for (Py_ssize_t i = 0; i < N_FUNCTIONS; i++) {
        table[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(addresses, i));
        if (table[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bind: a function address is NULL");
            return NULL;
        }
    }
    memcpy(&api, table, sizeof api);
    itemsize = layout[0];
    off_loc = layout[1];
    off_type = layout[2];
    off_ref = layout[3];
    off_time = layout[4];
    for (int k = 1; k <= 6; k++)
        off_p[k] = layout[4 + k];
    attr_tag = attrs[0];
    attr_opcode = attrs[1];
    attr_elements = attrs[2];
    attr_ea = attrs[3];
    attr_ls = attrs[4];
    attr_spu = attrs[5];
    metric_types[0] = (OTF2_Type)uint64_type;
    bound = 1;
    Py_RETURN_NONE;
}

/* write(writer, attribute_list, rows, per_type) -> first non-zero OTF2 error code, or 0.
 * rows: a C-contiguous buffer of whole rows. An event's calls are all made (as the Python
 * path's `a | b` does); the first event whose calls return non-zero stops the writing.
 * per_type: a writable int64 buffer indexed by event type, incremented for every event. */
static PyObject *evt_write(PyObject *self, PyObject *args)
{
    PyObject *writer_obj, *attrs_obj;
    Py_buffer view, counts_view;
    (void)self;
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "write before bind");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOy*w*", &writer_obj, &attrs_obj, &view, &counts_view))
        return NULL;
    OTF2_EvtWriter *w = PyLong_AsVoidPtr(writer_obj);
    OTF2_AttributeList *a = PyLong_AsVoidPtr(attrs_obj);
    if (PyErr_Occurred() || w == NULL || a == NULL || view.len % itemsize
        || counts_view.len < (MAX_TYPE + 1) * (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&counts_view);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "write: NULL writer, a partial row or a short per_type buffer");
        return NULL;
    }
    int64_t *per_type = counts_view.buf;
    const char *row = view.buf;
    const char *end = row + view.len;
    OTF2_ErrorCode code = 0;
    for (; row < end && code == 0; row += itemsize) {
        const uint8_t type = *(const uint8_t *)(row + off_type);
        if (type <= MAX_TYPE)
            per_type[type]++;
        const OTF2_TimeStamp t = u64_at(row, off_time);
        const uint32_t ref = u32_at(row, off_ref);
        switch (type) {
        case ENTER:
            code = api.enter(w, NULL, t, ref);
            break;
        case LEAVE:
            code = api.leave(w, NULL, t, ref);
            break;
        case ENTER_OFF_SPU:
            code = api.attr_add_u64(a, attr_spu, u64_at(row, off_p[1]));
            code |= api.enter(w, a, t, ref);
            break;
        case RMA_GET:
        case RMA_PUT: {
            /* p4 = tag | opcode << 8 | list elements << 16 (model.Ev) */
            const uint64_t packed = u64_at(row, off_p[4]);
            code = api.attr_add_u64(a, attr_tag, packed & 0xFF);
            code |= api.attr_add_u64(a, attr_opcode, (packed >> 8) & 0xFF);
            code |= api.attr_add_u64(a, attr_elements, packed >> 16);
            code |= api.attr_add_u64(a, attr_ea, u64_at(row, off_p[5]));
            code |= api.attr_add_u64(a, attr_ls, u64_at(row, off_p[6]));
            code |= (type == RMA_GET ? api.rma_get : api.rma_put)(
                w, a, t, ref, (uint32_t)u64_at(row, off_p[1]), u64_at(row, off_p[2]),
                u64_at(row, off_p[3]));
            break;
        }
        case RMA_OP_COMPLETE_BLOCKING:
            code = api.rma_complete(w, NULL, t, ref, u64_at(row, off_p[3]));
            break;
        case RMA_WIN_CREATE:
            code = api.rma_win_create(w, NULL, t, ref);
            break;
        case RMA_WIN_DESTROY:
            code = api.rma_win_destroy(w, NULL, t, ref);
            break;
        case PROGRAM_BEGIN:
            code = api.program_begin(w, NULL, t, PROGRAM_NAME_STRING, 0, NULL);
            break;
        case PROGRAM_END:
            code = api.program_end(w, NULL, t, UNDEFINED_INT64);
            break;
        case METRIC: {
            OTF2_MetricValue value;
            value.unsigned_int = u64_at(row, off_p[1]);
            code = api.metric(w, NULL, t, ref, 1, metric_types, &value);
            break;
        }
        case MPI_SEND:
        case MPI_RECV:
            code = (type == MPI_SEND ? api.mpi_send : api.mpi_recv)(
                w, NULL, t, (uint32_t)u64_at(row, off_p[1]), ref,
                (uint32_t)u64_at(row, off_p[2]), u64_at(row, off_p[3]));
            break;
        case MPI_ISEND:
        case MPI_IRECV:
            code = (type == MPI_ISEND ? api.mpi_isend : api.mpi_irecv)(
                w, NULL, t, (uint32_t)u64_at(row, off_p[1]), ref,
                (uint32_t)u64_at(row, off_p[2]), u64_at(row, off_p[3]), u64_at(row, off_p[4]));
            break;
        case MPI_ISEND_COMPLETE:
            code = api.mpi_isend_complete(w, NULL, t, u64_at(row, off_p[4]));
            break;
        case MPI_IRECV_REQUEST:
            code = api.mpi_irecv_request(w, NULL, t, u64_at(row, off_p[4]));
            break;
        case MPI_COLL_BEGIN:
            code = api.mpi_coll_begin(w, NULL, t);
            break;
        case MPI_COLL_END:
            code = api.mpi_coll_end(w, NULL, t, (uint8_t)u64_at(row, off_p[1]), ref,
                                    (uint32_t)u64_at(row, off_p[2]), u64_at(row, off_p[3]),
                                    u64_at(row, off_p[4]));
            break;
        default:
            PyBuffer_Release(&view);
            PyBuffer_Release(&counts_view);
            PyErr_Format(PyExc_LookupError, "%d", (int)type);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&counts_view);
    return PyLong_FromLong(code);
}

/* check(rows, n_locations, n_regions, n_communicators, n_windows, n_metrics, comm_sizes,
 *       window_sizes) -> the first row that breaks writer.checks.check_events' rules, or -1.
 * The rules (the caller reports a broken one with check_events' own message): locations
 * exist and never decrease; time is non-negative and never decreases within a location; the
 * type is an Ev; the ref exists in its kind's list; peer and remote ranks and collective roots
 * (0xFFFFFFFF: none) are ranks of the event's communicator; uint32_t and uint8_t parameters
 * fit. comm_sizes and window_sizes: int64 buffers, the size of each communicator and of each
 * window's communicator. */
static PyObject *evt_check(PyObject *self, PyObject *args)
{
    Py_buffer view, comm_view, win_view;
    long long n_loc, n_regions, n_comms, n_windows, n_metrics;
    (void)self;
    if (!bound) {
        PyErr_SetString(PyExc_RuntimeError, "check before bind");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*LLLLLy*y*", &view, &n_loc, &n_regions, &n_comms,
                          &n_windows, &n_metrics, &comm_view, &win_view))
        return NULL;
    Py_ssize_t bad = -1;
    if (view.len % itemsize || comm_view.len < n_comms * 8 || win_view.len < n_windows * 8) {
        PyErr_SetString(PyExc_ValueError, "check: a partial row or short size tables");
        goto fail;
    }
    const int64_t *comm_size = comm_view.buf, *win_size = win_view.buf;
    const char *base = view.buf;
    const Py_ssize_t n = view.len / itemsize;
    uint32_t prev_loc = 0;
    int64_t prev_time = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *row = base + i * itemsize;
        const uint32_t loc = u32_at(row, off_loc);
        const int64_t t = (int64_t)u64_at(row, off_time);
        const uint8_t type = *(const uint8_t *)(row + off_type);
        const uint64_t ref = u32_at(row, off_ref);
        if (loc >= (uint64_t)n_loc || t < 0 || (i && (loc < prev_loc ||
                                                       (loc == prev_loc && t < prev_time)))) {
            bad = i;
            break;
        }
        prev_loc = loc;
        prev_time = t;
        int ok;
        switch (type) {
        case ENTER:
        case LEAVE:
        case ENTER_OFF_SPU:
            ok = ref < (uint64_t)n_regions;
            break;
        case MPI_SEND:
        case MPI_RECV:
        case MPI_ISEND:
        case MPI_IRECV:
            ok = ref < (uint64_t)n_comms
                 && u64_at(row, off_p[1]) < (uint64_t)comm_size[ref]
                 && u64_at(row, off_p[1]) <= UINT32_MAX && u64_at(row, off_p[2]) <= UINT32_MAX;
            break;
        case MPI_COLL_END: {
            const uint64_t root = u64_at(row, off_p[2]);
            ok = ref < (uint64_t)n_comms
                 && (root < (uint64_t)comm_size[ref] || root == UINT32_MAX)
                 && u64_at(row, off_p[1]) <= UINT8_MAX;
            break;
        }
        case RMA_GET:
        case RMA_PUT:
            ok = ref < (uint64_t)n_windows && u64_at(row, off_p[1]) < (uint64_t)win_size[ref]
                 && u64_at(row, off_p[1]) <= UINT32_MAX;
            break;
        case RMA_OP_COMPLETE_BLOCKING:
        case RMA_WIN_CREATE:
        case RMA_WIN_DESTROY:
            ok = ref < (uint64_t)n_windows;
            break;
        case METRIC:
            ok = ref < (uint64_t)n_metrics;
            break;
        case MPI_ISEND_COMPLETE:
        case MPI_IRECV_REQUEST:
        case MPI_COLL_BEGIN:
            ok = 1;
            break;
        case PROGRAM_BEGIN:
        case PROGRAM_END:
            ok = ref == 0;
            break;
        default:
            ok = 0;
        }
        if (!ok) {
            bad = i;
            break;
        }
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&comm_view);
    PyBuffer_Release(&win_view);
    return PyLong_FromSsize_t(bad);
fail:
    PyBuffer_Release(&view);
    PyBuffer_Release(&comm_view);
    PyBuffer_Release(&win_view);
    return NULL;
}

/* OTF2's locking callbacks (OTF2_Callbacks.h, "Operating OTF2 in a multi-threads context"),
 * with pthread mutexes as its own OTF2_Pthread_Locks.h makes them: an archive is thread safe
 * only with these set. writer.open_archive sets them, so one location's event writer can be
 * closed (its events flushed to its file) in a thread while the next location's events are
 * written. */
typedef int OTF2_CallbackCode; /* OTF2_CALLBACK_SUCCESS = 0, OTF2_CALLBACK_ERROR = 1 */
typedef struct OTF2_LockObject *OTF2_Lock;
typedef struct {
    void (*release)(void *);
    OTF2_CallbackCode (*create)(void *, OTF2_Lock *);
    OTF2_CallbackCode (*destroy)(void *, OTF2_Lock);
    OTF2_CallbackCode (*lock)(void *, OTF2_Lock);
    OTF2_CallbackCode (*unlock)(void *, OTF2_Lock);
} OTF2_LockingCallbacks;

static OTF2_CallbackCode lock_create(void *user, OTF2_Lock *lock)
{
    pthread_mutex_t *mutex = malloc(sizeof *mutex);
    (void)user;
    if (mutex == NULL || pthread_mutex_init(mutex, NULL) != 0) {
        free(mutex);
        return 1;
    }
    *lock = (OTF2_Lock)mutex;
    return 0;
}

static OTF2_CallbackCode lock_destroy(void *user, OTF2_Lock lock)
{
    (void)user;
    if (pthread_mutex_destroy((pthread_mutex_t *)lock) != 0)
        return 1;
    free(lock);
    return 0;
}

static OTF2_CallbackCode lock_lock(void *user, OTF2_Lock lock)
{
    (void)user;
    return pthread_mutex_lock((pthread_mutex_t *)lock) == 0 ? 0 : 1;
}

static OTF2_CallbackCode lock_unlock(void *user, OTF2_Lock lock)
{
    (void)user;
    return pthread_mutex_unlock((pthread_mutex_t *)lock) == 0 ? 0 : 1;
}

static const OTF2_LockingCallbacks locking = {
    NULL, lock_create, lock_destroy, lock_lock, lock_unlock,
};

static PyObject *locking_callbacks(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyLong_FromVoidPtr((void *)&locking);
}

/* OTF2's flush callbacks (OTF2_Callbacks.h): every buffer is flushed, as the bindings' Python
 * callback says, but without taking the GIL, so a location's close in the closing thread does
 * not wait for the thread writing the next location to let go of it. */
typedef uint8_t OTF2_FlushType; /* OTF2_NO_FLUSH = 0, OTF2_FLUSH = 1 */
typedef struct {
    OTF2_FlushType (*pre_flush)(void *, uint8_t, uint64_t, void *, _Bool);
    uint64_t (*post_flush)(void *, uint8_t, uint64_t);
} OTF2_FlushCallbacks;

static OTF2_FlushType always_flush(void *user, uint8_t file_type, uint64_t location,
                                   void *caller, _Bool final)
{
    (void)user;
    (void)file_type;
    (void)location;
    (void)caller;
    (void)final;
    return 1;
}

static const OTF2_FlushCallbacks flushing = {always_flush, NULL};

static PyObject *flush_callbacks(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return PyLong_FromVoidPtr((void *)&flushing);
}

static PyMethodDef methods[] = {
    {"flush_callbacks", flush_callbacks, METH_NOARGS,
     "flush_callbacks() -> address of an OTF2_FlushCallbacks that always flushes"},
    {"locking_callbacks", locking_callbacks, METH_NOARGS,
     "locking_callbacks() -> address of an OTF2_LockingCallbacks of pthread mutexes"},
    {"check", evt_check, METH_VARARGS,
     "check(rows, n_locations, n_regions, n_communicators, n_windows, n_metrics, comm_sizes, "
     "window_sizes) -> first row breaking the writer's input rules, or -1"},
    {"bind", bind_api, METH_VARARGS,
     "bind(addresses, layout, attribute_refs, uint64_type): the OTF2 functions and rows"},
    {"write", evt_write, METH_VARARGS,
     "write(writer, attribute_list, rows, per_type) -> first non-zero OTF2 error code, or 0"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_evtwrite",
    "The event writer's per-event loop in C (cell_otf2.writer).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__evtwrite(void)
{
    return PyModule_Create(&module);
}
