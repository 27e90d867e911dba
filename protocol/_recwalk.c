/* Walks the records section of a Kafka v2 record batch (already decompressed) and checks
 * that it is exactly what the batch header claims, so that nothing a consumer would choke
 * on is ever acknowledged. Python per record costs ~1 us; this costs a few ns.
 *
 * The input is hostile: every read is bounds-checked against the record's own length and the
 * buffer's end, nothing is allocated per record, and no length is trusted before the bytes it
 * claims are known to be present. protocol/record_walk.py documents the contract and
 * tests/unit/test_record_walk.py holds this walker to a pure-Python reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Keep in step with protocol/record_walk.py. */
enum {
    WALK_OK = 0,
    WALK_TRUNCATED = 1,       /* a record or a field ends past the bytes present */
    WALK_BAD_VARINT = 2,      /* a varint longer than Kafka allows (5 bytes, varlong 10) */
    WALK_BAD_LENGTH = 3,      /* negative record length, key/value length < -1, ... */
    WALK_LENGTH_MISMATCH = 4, /* fields end before the record's declared length */
    WALK_OFFSET_DELTA = 5,    /* offset delta of record i is not i */
    WALK_TOO_FEW = 6,         /* fewer records than the header's count */
    WALK_TOO_MANY = 7,        /* bytes left after the header's count of records */
};

/* Kafka's ByteUtils.readVarint: at most 5 bytes, value truncated to 32 bits, zig-zag. */
static inline int
read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pp;
    uint32_t value = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return WALK_TRUNCATED;
        uint8_t b = *p++;
        if (!(b & 0x80)) {
            value |= (uint32_t)b << shift;
            break;
        }
        value |= (uint32_t)(b & 0x7f) << shift;
        shift += 7;
        if (shift > 28)
            return WALK_BAD_VARINT;
    }
    *pp = p;
    *out = (int32_t)((value >> 1) ^ (0u - (value & 1)));
    return WALK_OK;
}

/* Kafka's ByteUtils.readVarlong: at most 10 bytes. */
static inline int
read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return WALK_TRUNCATED;
        uint8_t b = *p++;
        if (!(b & 0x80)) {
            value |= (uint64_t)b << shift;
            break;
        }
        value |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (shift > 63)
            return WALK_BAD_VARINT;
    }
    *pp = p;
    *out = (int64_t)((value >> 1) ^ (0ull - (value & 1)));
    return WALK_OK;
}

/* A length-prefixed byte field: -1 is null (when allowed), other negatives are refused. */
static inline int
skip_bytes(const uint8_t **pp, const uint8_t *end, int nullable, int *is_null)
{
    int32_t n;
    int rc = read_varint(pp, end, &n);
    if (rc)
        return rc;
    if (n < 0) {
        if (n == -1 && nullable) {
            *is_null = 1;
            return WALK_OK;
        }
        return WALK_BAD_LENGTH;
    }
    *is_null = 0;
    if ((size_t)(end - *pp) < (size_t)n)
        return WALK_TRUNCATED;
    *pp += n;
    return WALK_OK;
}

static int
append_index(PyObject **list, Py_ssize_t index)
{
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    PyObject *v = PyLong_FromSsize_t(index);
    if (v == NULL)
        return -1;
    int rc = PyList_Append(*list, v);
    Py_DECREF(v);
    return rc;
}

PyDoc_STRVAR(walk_doc,
"walk(records, count, base_timestamp, ts_min, ts_max, need_key)\n"
"-> (status, index, max_timestamp, keyless, bad_timestamps)\n\n"
"Walk a v2 batch's uncompressed records section. status 0 means it holds exactly `count`\n"
"well-formed records with offset deltas 0..count-1 and no byte left over; otherwise it is\n"
"the kind of fault and `index` the record where it was found. max_timestamp is the largest\n"
"base_timestamp + delta (-1 if none is larger). keyless and bad_timestamps are None or the\n"
"indexes of records without a key (only when need_key) and of records whose timestamp is\n"
"outside [ts_min, ts_max] (-1, Kafka's NO_TIMESTAMP, is never out of range); a record is\n"
"listed under its first fault only, as Kafka reports it.");

static PyObject *
walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_ts, ts_min, ts_max;
    int need_key;
    if (!PyArg_ParseTuple(args, "y*nLLLp", &view, &count, &base_ts, &ts_min, &ts_max,
                          &need_key))
        return NULL;

    const uint8_t *p = (const uint8_t *)view.buf;
    const uint8_t *end = p + view.len;
    PyObject *keyless = NULL, *bad_ts = NULL;
    int64_t max_ts = -1;
    int status = WALK_OK;
    Py_ssize_t i = 0;
    int failed = 0;

    /* Indexes are collected in a second pass: the first only notes that one is needed,
     * which an honest batch never does. The GIL is kept: the broker's one event loop thread
     * is the only caller, and releasing it costs more than a small batch's walk. */
    for (; p < end; i++) {
        if (i >= count) {
            status = WALK_TOO_MANY;
            break;
        }
        int32_t length;
        if ((status = read_varint(&p, end, &length)))
            break;
        if (length < 0) {
            status = WALK_BAD_LENGTH;
            break;
        }
        if ((size_t)(end - p) < (size_t)length) {
            status = WALK_TRUNCATED;
            break;
        }
        const uint8_t *rend = p + length;
        if (p >= rend) {
            status = WALK_TRUNCATED;
            break;
        }
        p++; /* record attributes: unused in v2 */
        int64_t ts_delta;
        int32_t offset_delta;
        if ((status = read_varlong(&p, rend, &ts_delta)))
            break;
        if ((status = read_varint(&p, rend, &offset_delta)))
            break;
        if (offset_delta != i) {
            status = WALK_OFFSET_DELTA;
            break;
        }
        int key_null, value_null;
        if ((status = skip_bytes(&p, rend, 1, &key_null)))
            break;
        if ((status = skip_bytes(&p, rend, 1, &value_null)))
            break;
        int32_t headers;
        if ((status = read_varint(&p, rend, &headers)))
            break;
        if (headers < 0) {
            status = WALK_BAD_LENGTH;
            break;
        }
        for (int32_t h = 0; h < headers && !status; h++) {
            int null;
            status = skip_bytes(&p, rend, 0, &null);
            if (!status)
                status = skip_bytes(&p, rend, 1, &null);
        }
        if (status)
            break;
        if (p != rend) {
            status = WALK_LENGTH_MISMATCH;
            break;
        }
        /* Java adds in 64 bits and wraps; so does Kafka's broker. */
        int64_t ts = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        if (ts > max_ts)
            max_ts = ts;
        if ((need_key && key_null) || (ts != -1 && (ts < ts_min || ts > ts_max)))
            failed = 1;
    }
    if (status == WALK_OK && i < count)
        status = WALK_TOO_FEW;

    if (status == WALK_OK && failed) {
        /* The batch is well-formed (walked once already), so this pass cannot fault. */
        const uint8_t *q = (const uint8_t *)view.buf;
        for (Py_ssize_t j = 0; q < end; j++) {
            int32_t length, offset_delta;
            int64_t ts_delta;
            int key_null;
            read_varint(&q, end, &length);
            const uint8_t *rend = q + length;
            q++;
            read_varlong(&q, rend, &ts_delta);
            read_varint(&q, rend, &offset_delta);
            skip_bytes(&q, rend, 1, &key_null);
            q = rend;
            int64_t ts = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
            if (need_key && key_null) {
                if (append_index(&keyless, j) < 0)
                    goto error;
            }
            else if (ts != -1 && (ts < ts_min || ts > ts_max)) {
                if (append_index(&bad_ts, j) < 0)
                    goto error;
            }
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(inLNN)", status, status ? i : (Py_ssize_t)0, (long long)max_ts,
                         keyless ? keyless : Py_NewRef(Py_None),
                         bad_ts ? bad_ts : Py_NewRef(Py_None));

error:
    Py_XDECREF(keyless);
    Py_XDECREF(bad_ts);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recwalk",
    "Bounds-checked walk over the records of a Kafka v2 record batch.", -1, methods,
};

PyMODINIT_FUNC
PyInit__recwalk(void)
{
    return PyModule_Create(&module);
}
