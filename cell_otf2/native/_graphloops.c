/* Graph loops of the SPE solver in C: shortest paths from given sources (Dijkstra, binary
 * heap), breadth-first order with predecessors, weak and strong components, over a graph in
 * compressed sparse rows (indptr, indices, weights). They give what scipy.sparse.csgraph's
 * dijkstra, breadth_first_order and connected_components give on the same rows (the same
 * distances, the same order and predecessors, a partition into the same components), so
 * that a conversion needs scipy.sparse only where a node fit does: importing it costs a
 * quarter of a second, more than the whole conversion of a short run. And the value step of
 * Howard's policy iteration (solver._evaluate_policy, the same floats), a walk per node
 * that took most of the solver's time in Python.
 *
 * Built by setuptools at install time (setup.py, optional); cell_otf2/native/graph_loops.py
 * builds the rows and takes scipy's functions, with the same results, where native.helper
 * does not give it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NULL_IDX (-9999) /* scipy's predecessor of the root and of every node not reached */

typedef struct {
    Py_ssize_t n;
    const int64_t *indptr, *indices;
    const double *data;
} Rows;

/* Parse (indptr, indices[, data]) buffers into `g`; checks the layout. */
static int rows_of(Py_buffer *ptr, Py_buffer *ind, Py_buffer *dat, Rows *g)
{
    if (ptr->len % 8 || ind->len % 8 || ptr->len < 8 || (dat && dat->len != ind->len)) {
        PyErr_SetString(PyExc_ValueError, "graph rows: bad layout");
        return -1;
    }
    g->n = ptr->len / 8 - 1;
    g->indptr = (const int64_t *)ptr->buf;
    g->indices = (const int64_t *)ind->buf;
    g->data = dat ? (const double *)dat->buf : NULL;
    Py_ssize_t m = ind->len / 8;
    if (g->indptr[0] != 0 || g->indptr[g->n] != m) {
        PyErr_SetString(PyExc_ValueError, "graph rows: indptr does not span the indices");
        return -1;
    }
    for (Py_ssize_t i = 0; i < g->n; i++)
        if (g->indptr[i + 1] < g->indptr[i]) {
            PyErr_SetString(PyExc_ValueError, "graph rows: indptr decreases");
            return -1;
        }
    for (Py_ssize_t e = 0; e < m; e++)
        if (g->indices[e] < 0 || g->indices[e] >= g->n) {
            PyErr_SetString(PyExc_IndexError, "graph rows: a column out of range");
            return -1;
        }
    return 0;
}

/* ---- Dijkstra ------------------------------------------------------------------------ */

typedef struct {
    double d;
    int64_t v;
} Item;

static void heap_push(Item *h, Py_ssize_t *size, double d, int64_t v)
{
    Py_ssize_t i = (*size)++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (h[p].d <= d)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i].d = d;
    h[i].v = v;
}

static Item heap_pop(Item *h, Py_ssize_t *size)
{
    Item top = h[0], last = h[--(*size)];
    Py_ssize_t i = 0, n = *size;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1].d < h[c].d)
            c++;
        if (h[c].d >= last.d)
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

/* dijkstra(indptr, indices, data, sources[, min_only]) -> bytes of len(sources) x n
 * doubles: the shortest distance from each source to every node, +inf where none; with
 * min_only, n doubles: the shortest distance from any of the sources (one walk from all of
 * them at once, as scipy's min_only). Weights must be >= 0 (a stored 0 is an edge). Float
 * addition rounds monotonically, so every correct Dijkstra gives the same minimum over
 * paths of the sums taken from the source: scipy's too. */
static PyObject *dijkstra(PyObject *self, PyObject *args)
{
    Py_buffer ptr, ind, dat, src;
    int min_only = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*|p", &ptr, &ind, &dat, &src, &min_only))
        return NULL;
    PyObject *result = NULL;
    Item *heap = NULL;
    unsigned char *done = NULL;
    Rows g;
    if (rows_of(&ptr, &ind, &dat, &g) < 0)
        goto out;
    if (src.len % 8) {
        PyErr_SetString(PyExc_ValueError, "dijkstra: sources are not int64");
        goto out;
    }
    Py_ssize_t k = src.len / 8, n = g.n, m = ind.len / 8;
    const int64_t *sources = (const int64_t *)src.buf;
    for (Py_ssize_t s = 0; s < k; s++)
        if (sources[s] < 0 || sources[s] >= n) {
            PyErr_SetString(PyExc_IndexError, "dijkstra: a source out of range");
            goto out;
        }
    Py_ssize_t walks = min_only ? (k > 0) : k, seeds = min_only ? k : 1;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((min_only ? 1 : k) * n * 8));
    heap = malloc(sizeof(Item) * (size_t)(m + seeds + 1));
    done = malloc((size_t)n + 1);
    if (!result || !heap || !done) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto out;
    }
    double *all = (double *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    if (min_only && k == 0)
        for (Py_ssize_t v = 0; v < n; v++)
            all[v] = INFINITY;
    for (Py_ssize_t s = 0; s < walks; s++) {
        double *dist = all + s * n;
        for (Py_ssize_t v = 0; v < n; v++)
            dist[v] = INFINITY;
        memset(done, 0, (size_t)n);
        Py_ssize_t size = 0;
        for (Py_ssize_t j = s * seeds; j < s * seeds + seeds; j++)
            if (dist[sources[j]] != 0.0) {
                dist[sources[j]] = 0.0;
                heap_push(heap, &size, 0.0, sources[j]);
            }
        while (size) {
            Item it = heap_pop(heap, &size);
            int64_t u = it.v;
            if (done[u])
                continue;
            done[u] = 1;
            for (int64_t e = g.indptr[u]; e < g.indptr[u + 1]; e++) {
                int64_t v = g.indices[e];
                double d = it.d + g.data[e];
                if (!done[v] && d < dist[v]) {
                    dist[v] = d;
                    heap_push(heap, &size, d, v);
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
out:
    free(heap);
    free(done);
    PyBuffer_Release(&ptr);
    PyBuffer_Release(&ind);
    PyBuffer_Release(&dat);
    PyBuffer_Release(&src);
    return result;
}

/* ---- breadth-first order --------------------------------------------------------------- */

/* bfs(indptr, indices, back_indptr, back_indices, root) -> (order, pred), bytes of int64:
 * the nodes reached from root in breadth-first order, each node's neighbours taken in row
 * order, then (where the back rows are not empty: an undirected walk) in the back rows'
 * order, as scipy's breadth_first_order takes them; pred: each node's predecessor, NULL_IDX
 * for the root and every node not reached. */
static PyObject *bfs(PyObject *self, PyObject *args)
{
    Py_buffer ptr, ind, bptr, bind;
    Py_ssize_t root;
    if (!PyArg_ParseTuple(args, "y*y*y*y*n", &ptr, &ind, &bptr, &bind, &root))
        return NULL;
    PyObject *order = NULL, *pred = NULL, *result = NULL;
    Rows g, b;
    int back = bptr.len > 0;
    if (rows_of(&ptr, &ind, NULL, &g) < 0 || (back && rows_of(&bptr, &bind, NULL, &b) < 0))
        goto out;
    if (back && b.n != g.n) {
        PyErr_SetString(PyExc_ValueError, "bfs: back rows of another size");
        goto out;
    }
    Py_ssize_t n = g.n;
    if (root < 0 || root >= n) {
        PyErr_SetString(PyExc_IndexError, "bfs: root out of range");
        goto out;
    }
    order = PyBytes_FromStringAndSize(NULL, n * 8);
    pred = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!order || !pred)
        goto out;
    int64_t *list = (int64_t *)PyBytes_AS_STRING(order);
    int64_t *pr = (int64_t *)PyBytes_AS_STRING(pred);
    for (Py_ssize_t v = 0; v < n; v++)
        pr[v] = NULL_IDX;
    Py_ssize_t head = 0, tail = 0;
    list[tail++] = root;
    while (head < tail) {
        int64_t u = list[head++];
        for (int pass = 0; pass < 1 + back; pass++) {
            const Rows *r = pass ? &b : &g;
            for (int64_t e = r->indptr[u]; e < r->indptr[u + 1]; e++) {
                int64_t v = r->indices[e];
                if (v != root && pr[v] == NULL_IDX) {
                    pr[v] = u;
                    list[tail++] = v;
                }
            }
        }
    }
    if (_PyBytes_Resize(&order, tail * 8) < 0)
        goto out;
    result = PyTuple_Pack(2, order, pred);
out:
    Py_XDECREF(order);
    Py_XDECREF(pred);
    PyBuffer_Release(&ptr);
    PyBuffer_Release(&ind);
    PyBuffer_Release(&bptr);
    PyBuffer_Release(&bind);
    return result;
}

/* ---- components ------------------------------------------------------------------------ */

/* weak(indptr, indices, back_indptr, back_indices) -> (count, labels bytes of int64): the
 * weakly connected components, labelled in the order of their least node (as scipy's). */
static PyObject *weak(PyObject *self, PyObject *args)
{
    Py_buffer ptr, ind, bptr, bind;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &ptr, &ind, &bptr, &bind))
        return NULL;
    PyObject *labels = NULL, *result = NULL;
    int64_t *stack = NULL;
    Rows g, b;
    if (rows_of(&ptr, &ind, NULL, &g) < 0 || rows_of(&bptr, &bind, NULL, &b) < 0)
        goto out;
    if (b.n != g.n) {
        PyErr_SetString(PyExc_ValueError, "weak: back rows of another size");
        goto out;
    }
    Py_ssize_t n = g.n;
    labels = PyBytes_FromStringAndSize(NULL, n * 8);
    stack = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!labels || !stack) {
        PyErr_NoMemory();
        goto out;
    }
    int64_t *lab = (int64_t *)PyBytes_AS_STRING(labels);
    for (Py_ssize_t v = 0; v < n; v++)
        lab[v] = -1;
    int64_t count = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (lab[s] >= 0)
            continue;
        Py_ssize_t top = 0;
        stack[top++] = s;
        lab[s] = count;
        while (top) {
            int64_t u = stack[--top];
            for (int pass = 0; pass < 2; pass++) {
                const Rows *r = pass ? &b : &g;
                for (int64_t e = r->indptr[u]; e < r->indptr[u + 1]; e++) {
                    int64_t v = r->indices[e];
                    if (lab[v] < 0) {
                        lab[v] = count;
                        stack[top++] = v;
                    }
                }
            }
        }
        count++;
    }
    result = Py_BuildValue("(LO)", (long long)count, labels);
out:
    Py_XDECREF(labels);
    free(stack);
    PyBuffer_Release(&ptr);
    PyBuffer_Release(&ind);
    PyBuffer_Release(&bptr);
    PyBuffer_Release(&bind);
    return result;
}

/* strong(indptr, indices) -> (count, labels bytes of int64): the strongly connected
 * components (Tarjan's algorithm without recursion), labelled in the order they close. */
static PyObject *strong(PyObject *self, PyObject *args)
{
    Py_buffer ptr, ind;
    if (!PyArg_ParseTuple(args, "y*y*", &ptr, &ind))
        return NULL;
    PyObject *labels = NULL, *result = NULL;
    int64_t *index = NULL, *low = NULL, *stack = NULL, *call = NULL, *edge = NULL;
    unsigned char *on = NULL;
    Rows g;
    if (rows_of(&ptr, &ind, NULL, &g) < 0)
        goto out;
    Py_ssize_t n = g.n;
    size_t sz = sizeof(int64_t) * (size_t)(n + 1);
    labels = PyBytes_FromStringAndSize(NULL, n * 8);
    index = malloc(sz);
    low = malloc(sz);
    stack = malloc(sz);
    call = malloc(sz);
    edge = malloc(sz);
    on = calloc((size_t)n + 1, 1);
    if (!labels || !index || !low || !stack || !call || !edge || !on) {
        PyErr_NoMemory();
        goto out;
    }
    int64_t *lab = (int64_t *)PyBytes_AS_STRING(labels);
    for (Py_ssize_t v = 0; v < n; v++)
        index[v] = -1;
    int64_t next = 0, count = 0;
    Py_ssize_t top = 0, depth = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (index[s] >= 0)
            continue;
        call[depth] = s;
        edge[depth++] = g.indptr[s];
        index[s] = low[s] = next++;
        stack[top++] = s;
        on[s] = 1;
        while (depth) {
            int64_t u = call[depth - 1];
            if (edge[depth - 1] < g.indptr[u + 1]) {
                int64_t v = g.indices[edge[depth - 1]++];
                if (index[v] < 0) {
                    index[v] = low[v] = next++;
                    stack[top++] = v;
                    on[v] = 1;
                    call[depth] = v;
                    edge[depth++] = g.indptr[v];
                } else if (on[v] && index[v] < low[u]) {
                    low[u] = index[v];
                }
                continue;
            }
            if (low[u] == index[u]) {
                int64_t v;
                do {
                    v = stack[--top];
                    on[v] = 0;
                    lab[v] = count;
                } while (v != u);
                count++;
            }
            depth--;
            if (depth && low[u] < low[call[depth - 1]])
                low[call[depth - 1]] = low[u];
        }
    }
    result = Py_BuildValue("(LO)", (long long)count, labels);
out:
    Py_XDECREF(labels);
    free(index);
    free(low);
    free(stack);
    free(call);
    free(edge);
    free(on);
    PyBuffer_Release(&ptr);
    PyBuffer_Release(&ind);
    return result;
}

/* ---- Howard's policy values ------------------------------------------------------------ */

static PyObject *fsum_fn; /* math.fsum: a cycle's mean is its exactly rounded sum / length */

/* policy_values(succ, wp, prev_x) -> (eta, x, handle), bytes of n doubles, doubles, int64:
 * solver._evaluate_policy on the functional graph u -> succ[u] of weights wp: per node the
 * mean of the cycle its walk reaches, the bias x (x[u] = wp[u] - eta + x[succ[u]], the
 * cycle's first node keeping prev_x) and that first node; the same operations in the same
 * order, the cycle's sum by math.fsum itself. */
static PyObject *policy_values(PyObject *self, PyObject *args)
{
    Py_buffer sb, wb, pb;
    if (!PyArg_ParseTuple(args, "y*y*y*", &sb, &wb, &pb))
        return NULL;
    PyObject *eta_b = NULL, *x_b = NULL, *h_b = NULL, *result = NULL;
    int64_t *path = NULL, *pos = NULL;
    unsigned char *state = NULL;
    Py_ssize_t n = sb.len / 8;
    if (sb.len % 8 || wb.len != sb.len || pb.len != sb.len) {
        PyErr_SetString(PyExc_ValueError, "policy_values: bad layout");
        goto out;
    }
    const int64_t *succ = (const int64_t *)sb.buf;
    const double *wp = (const double *)wb.buf, *prev_x = (const double *)pb.buf;
    for (Py_ssize_t u = 0; u < n; u++)
        if (succ[u] < 0 || succ[u] >= n) {
            PyErr_SetString(PyExc_IndexError, "policy_values: a successor out of range");
            goto out;
        }
    eta_b = PyBytes_FromStringAndSize(NULL, n * 8);
    x_b = PyBytes_FromStringAndSize(NULL, n * 8);
    h_b = PyBytes_FromStringAndSize(NULL, n * 8);
    path = malloc(sizeof(int64_t) * (size_t)(n + 1));
    pos = malloc(sizeof(int64_t) * (size_t)(n + 1));
    state = calloc((size_t)n + 1, 1);
    if (!eta_b || !x_b || !h_b || !path || !pos || !state) {
        PyErr_NoMemory();
        goto out;
    }
    double *eta = (double *)PyBytes_AS_STRING(eta_b), *x = (double *)PyBytes_AS_STRING(x_b);
    int64_t *handle = (int64_t *)PyBytes_AS_STRING(h_b);
    for (Py_ssize_t s = 0; s < n; s++) {
        if (state[s])
            continue;
        Py_ssize_t plen = 0, rest;
        int64_t u = s;
        while (state[u] == 0) {
            state[u] = 1;
            pos[u] = plen;
            path[plen++] = u;
            u = succ[u];
        }
        if (state[u] == 1) { /* the walk closed a new cycle at u */
            Py_ssize_t i = pos[u], len = plen - i;
            PyObject *parts = PyList_New(len);
            if (!parts)
                goto out;
            for (Py_ssize_t j = 0; j < len; j++) {
                PyObject *f = PyFloat_FromDouble(wp[path[i + j]]);
                if (!f) {
                    Py_DECREF(parts);
                    goto out;
                }
                PyList_SET_ITEM(parts, j, f);
            }
            PyObject *total = PyObject_CallOneArg(fsum_fn, parts);
            Py_DECREF(parts);
            if (!total)
                goto out;
            double mean = PyFloat_AsDouble(total) / (double)len;
            Py_DECREF(total);
            eta[u] = mean;
            x[u] = prev_x[u];
            handle[u] = u;
            state[u] = 2;
            for (Py_ssize_t j = plen - 1; j > i; j--) {
                int64_t c = path[j];
                eta[c] = mean;
                x[c] = wp[c] - mean + x[succ[c]];
                handle[c] = u;
                state[c] = 2;
            }
            rest = i;
        } else {
            rest = plen;
        }
        for (Py_ssize_t j = rest - 1; j >= 0; j--) {
            int64_t c = path[j], nxt = succ[c];
            eta[c] = eta[nxt];
            x[c] = wp[c] - eta[nxt] + x[nxt];
            handle[c] = handle[nxt];
            state[c] = 2;
        }
    }
    result = PyTuple_Pack(3, eta_b, x_b, h_b);
out:
    Py_XDECREF(eta_b);
    Py_XDECREF(x_b);
    Py_XDECREF(h_b);
    free(path);
    free(pos);
    free(state);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&wb);
    PyBuffer_Release(&pb);
    return result;
}

static PyMethodDef methods[] = {
    {"dijkstra", dijkstra, METH_VARARGS,
     "dijkstra(indptr, indices, data, sources[, min_only]): shortest distances from each "
     "source, or from the nearest of them"},
    {"bfs", bfs, METH_VARARGS,
     "bfs(indptr, indices, back_indptr, back_indices, root): breadth-first order and "
     "predecessors"},
    {"weak", weak, METH_VARARGS,
     "weak(indptr, indices, back_indptr, back_indices): weakly connected components"},
    {"strong", strong, METH_VARARGS, "strong(indptr, indices): strongly connected components"},
    {"policy_values", policy_values, METH_VARARGS,
     "policy_values(succ, wp, prev_x): Howard's cycle means, biases and cycle handles"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_graphloops",
    "Graph loops of the SPE solver (cell_otf2/native/graph_loops.py binds them).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__graphloops(void)
{
    PyObject *math = PyImport_ImportModule("math");
    if (!math)
        return NULL;
    fsum_fn = PyObject_GetAttrString(math, "fsum");
    Py_DECREF(math);
    if (!fsum_fn)
        return NULL;
    return PyModule_Create(&module);
}
