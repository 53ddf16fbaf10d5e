/* The record decoder's hot loop in C: brook.record.records._decode_records, the consumer's
 * per-record cost (bench/README.md, issue #19).
 *
 * decode_records(data, pos, end, count, base_offset, base_timestamp, log_append_time) returns
 * exactly the list the Python loop returns for well-formed records, and None for anything
 * else (a length that does not fit, a varint too long, a field past its record, text that is
 * not UTF-8, an offset or timestamp past int64): the caller then runs the Python loop, which
 * names the fault. So this code never decides what is malformed, and it never reads a byte
 * at or past `end`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const unsigned char *data;
    Py_ssize_t pos;
    Py_ssize_t end;
} Cursor;

/* An unsigned base-128 varint of at most `bytes_max` bytes; 0 on failure. */
static int read_unsigned(Cursor *c, int bytes_max, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < bytes_max; i++) {
        if (c->pos >= c->end) {
            return 0;
        }
        unsigned char byte = c->data[c->pos++];
        if (shift == 63 && (byte & 0x7E)) {
            return 0; /* past 64 bits: the Python loop says so */
        }
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = result;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* A zig-zag varint of at most `bits` bits (32: int32, 5 bytes; 64: int64, 10 bytes). */
static int read_zigzag(Cursor *c, int bits, int64_t *out) {
    uint64_t unsigned_value;
    if (!read_unsigned(c, bits == 32 ? 5 : 10, &unsigned_value)) {
        return 0;
    }
    if (bits == 32 && (unsigned_value >> 32)) {
        return 0;
    }
    *out = (int64_t)(unsigned_value >> 1) ^ -(int64_t)(unsigned_value & 1);
    return 1;
}

/* A key, value or header value: bytes, or None for length -1. NULL on failure (no error set
 * unless allocation failed: *failed tells). */
static PyObject *read_blob(Cursor *c, Py_ssize_t record_end, int *failed) {
    int64_t size;
    if (!read_zigzag(c, 32, &size)) {
        *failed = 1;
        return NULL;
    }
    if (size == -1) {
        Py_RETURN_NONE;
    }
    if (size < 0 || c->pos + size > record_end) {
        *failed = 1;
        return NULL;
    }
    PyObject *blob = PyBytes_FromStringAndSize((const char *)c->data + c->pos, size);
    if (blob == NULL) {
        *failed = 2;
        return NULL;
    }
    c->pos += size;
    return blob;
}

static PyObject *read_headers(Cursor *c, Py_ssize_t record_end, int *failed) {
    int64_t count;
    if (!read_zigzag(c, 32, &count) || count < 0 || count > record_end - c->pos) {
        *failed = 1;
        return NULL;
    }
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL) {
        *failed = 2;
        return NULL;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t size;
        if (!read_zigzag(c, 32, &size) || size < 0 || c->pos + size > record_end) {
            *failed = 1;
            Py_DECREF(headers);
            return NULL;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)c->data + c->pos, size, "strict");
        if (name == NULL) {
            *failed = PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? 1 : 2;
            if (*failed == 1) {
                PyErr_Clear();
            }
            Py_DECREF(headers);
            return NULL;
        }
        c->pos += size;
        PyObject *value = read_blob(c, record_end, failed);
        if (value == NULL) {
            Py_DECREF(name);
            Py_DECREF(headers);
            return NULL;
        }
        PyObject *pair = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (pair == NULL) {
            *failed = 2;
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
}

static PyObject *decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 7 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_records: data must be bytes");
        return NULL;
    }
    long long numbers[6] = {0, 0, 0, 0, 0, 0}; /* pos, end, count, base offset and timestamp */
    int fixed_timestamp = args[6] != Py_None;
    for (int i = 0; i < (fixed_timestamp ? 6 : 5); i++) {
        numbers[i] = PyLong_AsLongLong(args[i + 1]);
        if (numbers[i] == -1 && PyErr_Occurred()) {
            /* An argument past int64: the Python loop takes it. */
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                return NULL;
            }
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    long long pos = numbers[0], end = numbers[1], count = numbers[2];
    long long base_offset = numbers[3], base_timestamp = numbers[4];
    long long log_append_time = numbers[5];
    long long size = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || end < pos || end > size || count < 0 || count > end - pos) {
        Py_RETURN_NONE;
    }
    Cursor c = {(const unsigned char *)PyBytes_AS_STRING(args[0]), (Py_ssize_t)pos,
                (Py_ssize_t)end};
    PyObject *records = PyList_New(count);
    if (records == NULL) {
        return NULL;
    }
    PyObject *no_headers = PyTuple_New(0);
    if (no_headers == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    int failed = 0;
    for (long long index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta;
        if (!read_zigzag(&c, 32, &length) || length < 1 || c.pos + length > c.end) {
            failed = 1;
            break;
        }
        Py_ssize_t record_end = c.pos + length;
        c.pos += 1; /* attributes: unused by the format */
        Cursor fields = {c.data, c.pos, record_end};
        if (!read_zigzag(&fields, 64, &timestamp_delta) ||
            !read_zigzag(&fields, 32, &offset_delta)) {
            failed = 1;
            break;
        }
        long long offset, timestamp;
        if (__builtin_add_overflow(base_offset, (long long)offset_delta, &offset)) {
            failed = 1;
            break;
        }
        if (fixed_timestamp) {
            timestamp = log_append_time;
        } else if (__builtin_add_overflow(base_timestamp, (long long)timestamp_delta,
                                          &timestamp)) {
            failed = 1;
            break;
        }
        PyObject *key = read_blob(&fields, record_end, &failed);
        if (key == NULL) {
            break;
        }
        PyObject *value = read_blob(&fields, record_end, &failed);
        if (value == NULL) {
            Py_DECREF(key);
            break;
        }
        PyObject *headers;
        if (fields.pos < record_end && fields.data[fields.pos] == 0) {
            fields.pos += 1;
            headers = Py_NewRef(no_headers);
        } else {
            headers = read_headers(&fields, record_end, &failed);
            if (headers == NULL) {
                Py_DECREF(key);
                Py_DECREF(value);
                break;
            }
        }
        if (fields.pos != record_end) {
            failed = 1;
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            break;
        }
        PyObject *record = PyTuple_New(5);
        PyObject *offset_object = PyLong_FromLongLong(offset);
        PyObject *timestamp_object = PyLong_FromLongLong(timestamp);
        if (record == NULL || offset_object == NULL || timestamp_object == NULL) {
            Py_XDECREF(record);
            Py_XDECREF(offset_object);
            Py_XDECREF(timestamp_object);
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            failed = 2;
            break;
        }
        PyTuple_SET_ITEM(record, 0, offset_object);
        PyTuple_SET_ITEM(record, 1, timestamp_object);
        PyTuple_SET_ITEM(record, 2, key);
        PyTuple_SET_ITEM(record, 3, value);
        PyTuple_SET_ITEM(record, 4, headers);
        PyList_SET_ITEM(records, index, record);
        c.pos = record_end;
    }
    Py_DECREF(no_headers);
    if (!failed && c.pos != c.end) {
        failed = 1;
    }
    if (failed) {
        Py_DECREF(records);
        if (failed == 2) {
            return NULL; /* an allocation failed: the error is set */
        }
        Py_RETURN_NONE;
    }
    return records;
}

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(data, pos, end, count, base_offset, base_timestamp, log_append_time)"
     " -> list of (offset, timestamp, key, value, headers), or None to decode in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "brook.record._speedups",
    "The record decoder's hot loop in C (see brook/record/records.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
