/* The OTF2 library's own rate for an event table: bench/throughput.py compiles this with gcc
 * into a temporary folder and runs it on the table the writer was timed on.
 *
 *   otf2_rate LIBRARY EVENTS OUT_DIR N_LOCATIONS MALLOPT
 *             ITEMSIZE OFF_LOC OFF_TYPE OFF_REF OFF_TIME OFF_P1 OFF_P2 OFF_P3 OFF_P4 OFF_P5 OFF_P6
 *             FILEMODE_WRITE SUBSTRATE_POSIX COMPRESSION_NONE FLUSH UINT64_TYPE
 *             ATTR_TAG ATTR_OPCODE ATTR_ELEMENTS ATTR_EA ATTR_LS ATTR_SPU
 *
 * LIBRARY is dlopen'ed (the `otf2` wheel's _otf2 extension, which exports every OTF2_* symbol);
 * EVENTS is a file of EVENT_DTYPE rows sorted by location (read before timing). The archive
 * is opened as the writer opens it (1 MiB event chunks, 256 KiB definition chunks, POSIX, no
 * compression, serial collectives, a pre-flush callback answering FLUSH); each location gets
 * an empty local definition file and its events through the calls the writer makes, in the
 * same order (cell_otf2/native/_evtwrite.c); no global definitions. MALLOPT=1 first tells glibc to
 * keep 1 MiB blocks in the heap (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD), as the
 * writer does. Prints one JSON line: events, wall and CPU seconds from opening the archive
 * to closing it, the first non-zero error code.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int ec;
typedef uint64_t ts;
typedef void *ptr;

typedef struct {
    int (*pre_flush)(void *, uint8_t, uint64_t, void *, bool);
    uint64_t (*post_flush)(void *, uint8_t, uint64_t);
} flush_callbacks;

static int flush_value;

static int pre_flush(void *u, uint8_t file_type, uint64_t loc, void *caller, bool final)
{
    (void)u, (void)file_type, (void)loc, (void)caller, (void)final;
    return flush_value;
}

static void *lib;

static void *sym(const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "otf2_rate: %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return f;
}

static inline uint64_t u64(const char *row, long off)
{
    uint64_t v;
    memcpy(&v, row + off, sizeof v);
    return v;
}

static inline uint32_t u32(const char *row, long off)
{
    uint32_t v;
    memcpy(&v, row + off, sizeof v);
    return v;
}

static double now(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 28) {
        fprintf(stderr, "otf2_rate: 27 arguments expected (see the source)\n");
        return 2;
    }
    const char *events_path = argv[2], *out_dir = argv[3];
    long n_loc = atol(argv[4]);
    int use_mallopt = atoi(argv[5]);
    long a[22];
    for (int i = 0; i < 22; i++)
        a[i] = atol(argv[6 + i]);
    const long itemsize = a[0], o_loc = a[1], o_type = a[2], o_ref = a[3], o_time = a[4];
    const long *o_p = &a[4]; /* o_p[k]: offset of pk, k = 1 .. 6 */
    const int filemode = (int)a[11], substrate = (int)a[12], compression = (int)a[13];
    flush_value = (int)a[14];
    uint8_t metric_types[1] = {(uint8_t)a[15]};
    const uint32_t at_tag = a[16], at_opcode = a[17], at_elements = a[18], at_ea = a[19],
                   at_ls = a[20], at_spu = a[21];

    if (use_mallopt) {
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20);
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "otf2_rate: %s\n", dlerror());
        return 2;
    }
    ptr (*archive_open)(const char *, const char *, uint8_t, uint64_t, uint64_t, uint8_t,
                        uint8_t) = sym("OTF2_Archive_Open");
    ec (*set_flush)(ptr, const flush_callbacks *, void *) = sym("OTF2_Archive_SetFlushCallbacks");
    ec (*set_serial)(ptr) = sym("OTF2_Archive_SetSerialCollectiveCallbacks");
    ec (*open_evt)(ptr) = sym("OTF2_Archive_OpenEvtFiles");
    ec (*open_def)(ptr) = sym("OTF2_Archive_OpenDefFiles");
    ec (*close_evt_files)(ptr) = sym("OTF2_Archive_CloseEvtFiles");
    ec (*close_def_files)(ptr) = sym("OTF2_Archive_CloseDefFiles");
    ptr (*get_def)(ptr, uint64_t) = sym("OTF2_Archive_GetDefWriter");
    ec (*close_def)(ptr, ptr) = sym("OTF2_Archive_CloseDefWriter");
    ptr (*get_evt)(ptr, uint64_t) = sym("OTF2_Archive_GetEvtWriter");
    ec (*close_evt)(ptr, ptr) = sym("OTF2_Archive_CloseEvtWriter");
    ec (*archive_close)(ptr) = sym("OTF2_Archive_Close");
    ptr (*attr_new)(void) = sym("OTF2_AttributeList_New");
    ec (*attr_delete)(ptr) = sym("OTF2_AttributeList_Delete");
    ec (*add_u64)(ptr, uint32_t, uint64_t) = sym("OTF2_AttributeList_AddUint64");
    ec (*enter)(ptr, ptr, ts, uint32_t) = sym("OTF2_EvtWriter_Enter");
    ec (*leave)(ptr, ptr, ts, uint32_t) = sym("OTF2_EvtWriter_Leave");
    ec (*mpi_send)(ptr, ptr, ts, uint32_t, uint32_t, uint32_t, uint64_t) =
        sym("OTF2_EvtWriter_MpiSend");
    ec (*mpi_recv)(ptr, ptr, ts, uint32_t, uint32_t, uint32_t, uint64_t) =
        sym("OTF2_EvtWriter_MpiRecv");
    ec (*mpi_isend)(ptr, ptr, ts, uint32_t, uint32_t, uint32_t, uint64_t, uint64_t) =
        sym("OTF2_EvtWriter_MpiIsend");
    ec (*mpi_irecv)(ptr, ptr, ts, uint32_t, uint32_t, uint32_t, uint64_t, uint64_t) =
        sym("OTF2_EvtWriter_MpiIrecv");
    ec (*isend_complete)(ptr, ptr, ts, uint64_t) = sym("OTF2_EvtWriter_MpiIsendComplete");
    ec (*irecv_request)(ptr, ptr, ts, uint64_t) = sym("OTF2_EvtWriter_MpiIrecvRequest");
    ec (*coll_begin)(ptr, ptr, ts) = sym("OTF2_EvtWriter_MpiCollectiveBegin");
    ec (*coll_end)(ptr, ptr, ts, uint8_t, uint32_t, uint32_t, uint64_t, uint64_t) =
        sym("OTF2_EvtWriter_MpiCollectiveEnd");
    ec (*rma_get)(ptr, ptr, ts, uint32_t, uint32_t, uint64_t, uint64_t) =
        sym("OTF2_EvtWriter_RmaGet");
    ec (*rma_put)(ptr, ptr, ts, uint32_t, uint32_t, uint64_t, uint64_t) =
        sym("OTF2_EvtWriter_RmaPut");
    ec (*rma_complete)(ptr, ptr, ts, uint32_t, uint64_t) =
        sym("OTF2_EvtWriter_RmaOpCompleteBlocking");
    ec (*metric)(ptr, ptr, ts, uint32_t, uint8_t, const uint8_t *, const uint64_t *) =
        sym("OTF2_EvtWriter_Metric");
    ec (*rma_win_create)(ptr, ptr, ts, uint32_t) = sym("OTF2_EvtWriter_RmaWinCreate");
    ec (*rma_win_destroy)(ptr, ptr, ts, uint32_t) = sym("OTF2_EvtWriter_RmaWinDestroy");

    FILE *f = fopen(events_path, "rb");
    if (!f) {
        perror(events_path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *rows = malloc(bytes ? bytes : 1);
    if (!rows || fread(rows, 1, bytes, f) != (size_t)bytes) {
        fprintf(stderr, "otf2_rate: cannot read %s\n", events_path);
        return 2;
    }
    fclose(f);
    const long n = bytes / itemsize;

    double wall0 = now(CLOCK_MONOTONIC), cpu0 = now(CLOCK_PROCESS_CPUTIME_ID);
    ptr archive = archive_open(out_dir, "rate", filemode, 1024 * 1024, 256 * 1024, substrate,
                               compression);
    if (!archive) {
        fprintf(stderr, "otf2_rate: cannot open the archive in %s\n", out_dir);
        return 2;
    }
    flush_callbacks callbacks = {pre_flush, NULL};
    set_flush(archive, &callbacks, NULL);
    set_serial(archive);
    open_evt(archive);
    open_def(archive);
    ptr attrs = attr_new();
    ec code = 0;
    long i = 0;
    for (long loc = 0; loc < n_loc && code == 0; loc++) {
        close_def(archive, get_def(archive, loc));
        ptr w = get_evt(archive, loc);
        for (; i < n && (long)u32(rows + i * itemsize, o_loc) == loc && code == 0; i++) {
            const char *row = rows + i * itemsize;
            const uint8_t type = *(const uint8_t *)(row + o_type);
            const ts t = u64(row, o_time);
            const uint32_t ref = u32(row, o_ref);
            switch (type) {
            case 1: code = enter(w, NULL, t, ref); break;
            case 2: code = leave(w, NULL, t, ref); break;
            case 15:
                code = add_u64(attrs, at_spu, u64(row, o_p[1]));
                code |= enter(w, attrs, t, ref);
                break;
            case 11:
            case 12: {
                const uint64_t packed = u64(row, o_p[4]);
                code = add_u64(attrs, at_tag, packed & 0xFF);
                code |= add_u64(attrs, at_opcode, (packed >> 8) & 0xFF);
                code |= add_u64(attrs, at_elements, packed >> 16);
                code |= add_u64(attrs, at_ea, u64(row, o_p[5]));
                code |= add_u64(attrs, at_ls, u64(row, o_p[6]));
                code |= (type == 11 ? rma_get : rma_put)(w, attrs, t, ref,
                                                         (uint32_t)u64(row, o_p[1]),
                                                         u64(row, o_p[2]), u64(row, o_p[3]));
                break;
            }
            case 13: code = rma_complete(w, NULL, t, ref, u64(row, o_p[3])); break;
            case 14: {
                const uint64_t value = u64(row, o_p[1]);
                code = metric(w, NULL, t, ref, 1, metric_types, &value);
                break;
            }
            case 3:
            case 4:
                code = (type == 3 ? mpi_send : mpi_recv)(w, NULL, t, (uint32_t)u64(row, o_p[1]),
                                                         ref, (uint32_t)u64(row, o_p[2]),
                                                         u64(row, o_p[3]));
                break;
            case 5:
            case 8:
                code = (type == 5 ? mpi_isend : mpi_irecv)(
                    w, NULL, t, (uint32_t)u64(row, o_p[1]), ref, (uint32_t)u64(row, o_p[2]),
                    u64(row, o_p[3]), u64(row, o_p[4]));
                break;
            case 6: code = isend_complete(w, NULL, t, u64(row, o_p[4])); break;
            case 7: code = irecv_request(w, NULL, t, u64(row, o_p[4])); break;
            case 9: code = coll_begin(w, NULL, t); break;
            case 10:
                code = coll_end(w, NULL, t, (uint8_t)u64(row, o_p[1]), ref,
                                (uint32_t)u64(row, o_p[2]), u64(row, o_p[3]), u64(row, o_p[4]));
                break;
            case 16: code = rma_win_create(w, NULL, t, ref); break;
            case 17: code = rma_win_destroy(w, NULL, t, ref); break;
            default: fprintf(stderr, "otf2_rate: unknown event type %d\n", type); return 2;
            }
        }
        close_evt(archive, w);
    }
    attr_delete(attrs);
    close_evt_files(archive);
    close_def_files(archive);
    archive_close(archive);
    double wall = now(CLOCK_MONOTONIC) - wall0, cpu = now(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    printf("{\"events\": %ld, \"wall\": %.6f, \"cpu\": %.6f, \"code\": %d}\n", i, wall, cpu,
           code);
    free(rows);
    return code != 0;
}
