/* The single-batch hot path of a leader append, in C (actors/core/batch_fast.py).
 *
 * Two functions with the exact behaviour of their pure-Python twins in
 * actors/core/batch_fast.py (tests/core/test_batch_fast.py runs both on the same
 * inputs):
 *
 *   single_batch(buffer) -> tuple | None
 *       The 13 header fields of the buffer if it is exactly one valid client
 *       batch (length, magic 2, offset range and record count, no control
 *       bit, producer and transaction rules, CRC-32C), else None.
 *   write_batch(fd, buffer, base_offset, batch_length, leader_epoch
 *               [, index, slot, relative_offset, position]) -> int
 *       One writev of the batch with its first 17 bytes replaced by base
 *       offset, batch length, leader epoch and magic 2: the bytes written
 *       (maybe fewer than all), or OSError. With an index (a writable buffer,
 *       the active segment's mapped offset index), once the whole batch is
 *       written the entry (relative offset, position) goes at byte ``slot``
 *       of it, as OffsetIndex.entry packs it; not after a short write.
 *
 * CRC-32C (Castagnoli, reflected, as Kafka's): on x86-64 with SSE4.2 three
 * independent crc32 instruction streams over adjacent blocks, joined by
 * multiplying by x^(8*block) (tables built at import); else a table per byte.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21
#define CURRENT_MAGIC 2
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define POLY 0x82F63B78u /* CRC-32C, reflected */
#define BLOCK 512        /* bytes per stream per round of the three-stream loop */
/* A batch handed to a leader append is usually out of the L1/L2 caches (the
 * kernel's copy of the previous writes pushed it out): waiting on each line
 * bounds the CRC, several times the cost of the same bytes cached. The loop asks
 * for each stream's lines two rounds before it reads them (a prefetch never
 * faults, so past the end is harmless). */
#define PREFETCH_AHEAD (2 * 3 * BLOCK)

static uint32_t byte_table[256];
/* shift_table[k][b]: the CRC register b << 8k advanced over BLOCK zero bytes. */
static uint32_t shift_table[4][256];
static int have_hw;

static uint32_t crc_sw(uint32_t reg, const unsigned char *p, size_t n) {
    while (n--) reg = byte_table[(reg ^ *p++) & 0xFF] ^ (reg >> 8);
    return reg;
}

static uint32_t zeros_sw(uint32_t reg, size_t n) {
    while (n--) reg = byte_table[reg & 0xFF] ^ (reg >> 8);
    return reg;
}

static void build_tables(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int i = 0; i < 8; i++) r = (r >> 1) ^ (POLY & (0u - (r & 1)));
        byte_table[b] = r;
    }
    /* Advancing over zeros is linear in the register: tables of bytes suffice. */
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) shift_table[k][b] = zeros_sw(b << (8 * k), BLOCK);
}

static inline uint32_t shift_block(uint32_t r) {
    return shift_table[0][r & 0xFF] ^ shift_table[1][(r >> 8) & 0xFF]
           ^ shift_table[2][(r >> 16) & 0xFF] ^ shift_table[3][r >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HW_POSSIBLE 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t reg, const unsigned char *p,
                                                          size_t n) {
    uint64_t c0 = reg;
    while (n >= 3 * BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *q = p + BLOCK, *s = p + 2 * BLOCK;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t a, b, c;
            if ((i & 63) == 0) { /* a cache line each: ask for it two rounds early */
                __builtin_prefetch(p + i + PREFETCH_AHEAD);
                __builtin_prefetch(q + i + PREFETCH_AHEAD);
                __builtin_prefetch(s + i + PREFETCH_AHEAD);
            }
            memcpy(&a, p + i, 8);
            memcpy(&b, q + i, 8);
            memcpy(&c, s + i, 8);
            c0 = __builtin_ia32_crc32di(c0, a);
            c1 = __builtin_ia32_crc32di(c1, b);
            c2 = __builtin_ia32_crc32di(c2, c);
        }
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = __builtin_ia32_crc32di(c0, a);
        p += 8;
        n -= 8;
    }
    uint32_t r = (uint32_t)c0;
    while (n--) r = __builtin_ia32_crc32qi(r, *p++);
    return r;
}
#else
#define HW_POSSIBLE 0
#endif

static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t reg = ~crc;
#if HW_POSSIBLE
    if (have_hw) return ~crc_hw(reg, p, n);
#endif
    return ~crc_sw(reg, p, n);
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8)
                     | (uint32_t)p[3]);
}
static inline int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static PyObject *single_batch(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len;
    if (n < HEADER_SIZE) goto none;
    int64_t base_offset = be64(p);
    int32_t batch_length = be32(p + 8);
    int32_t leader_epoch = be32(p + 12);
    int magic = (signed char)p[16];
    uint32_t crc = (uint32_t)be32(p + 17);
    int16_t attributes = be16(p + 21);
    int32_t last_offset_delta = be32(p + 23);
    int64_t base_timestamp = be64(p + 27);
    int64_t max_timestamp = be64(p + 35);
    int64_t producer_id = be64(p + 43);
    int16_t producer_epoch = be16(p + 51);
    int32_t base_sequence = be32(p + 53);
    int32_t records_count = be32(p + 57);
    if ((int64_t)batch_length + LOG_OVERHEAD != n || magic != CURRENT_MAGIC
        || (int64_t)records_count != (int64_t)last_offset_delta + 1
        || (int64_t)last_offset_delta + 1 <= 0 || (attributes & CONTROL_BIT)
        || !(producer_id < 0 || base_sequence >= 0)
        || !(producer_id >= 0 || !(attributes & TRANSACTIONAL_BIT)))
        goto none;
    /* The GIL is held: a bytearray cannot change under the check. */
    if (crc32c(0, p + CRC_START, (size_t)(n - CRC_START)) != crc) goto none;
    PyBuffer_Release(&view);
    long long values[13] = {base_offset, batch_length, leader_epoch, magic, crc, attributes,
                            last_offset_delta, base_timestamp, max_timestamp, producer_id,
                            producer_epoch, base_sequence, records_count};
    PyObject *result = PyTuple_New(13);
    if (result == NULL) return NULL;
    for (int i = 0; i < 13; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, item);
    }
    return result;
none:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *write_batch(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 5 || nargs > 9) {
        PyErr_SetString(PyExc_TypeError,
                        "write_batch(fd, buffer, base_offset, batch_length, leader_epoch"
                        "[, index, slot, relative_offset, position])");
        return NULL;
    }
    /* An int, as os.writev takes it: a bad descriptor is the system call's EBADF. */
    long fd_arg = PyLong_AsLong(args[0]);
    if (fd_arg == -1 && PyErr_Occurred()) return NULL;
    if (fd_arg < INT_MIN || fd_arg > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "fd out of int range");
        return NULL;
    }
    int fd = (int)fd_arg;
    long long base_offset = PyLong_AsLongLong(args[2]);
    if (base_offset == -1 && PyErr_Occurred()) return NULL;
    long batch_length = PyLong_AsLong(args[3]);
    if (batch_length == -1 && PyErr_Occurred()) return NULL;
    long leader_epoch = PyLong_AsLong(args[4]);
    if (leader_epoch == -1 && PyErr_Occurred()) return NULL;
    if (batch_length < INT32_MIN || batch_length > INT32_MAX || leader_epoch < INT32_MIN
        || leader_epoch > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "batch_length or leader_epoch out of int32 range");
        return NULL;
    }
    /* The index entry's arguments are all checked before anything is written. */
    Py_buffer index = {0};
    int have_index = nargs > 5 && args[5] != Py_None;
    long long entry_args[3] = {0, 0, 0}; /* slot, relative_offset, position; 0 if left out */
    for (Py_ssize_t i = 6; have_index && i < nargs; i++) {
        entry_args[i - 6] = PyLong_AsLongLong(args[i]);
        if (entry_args[i - 6] == -1 && PyErr_Occurred()) return NULL;
    }
    long long slot = entry_args[0], relative_offset = entry_args[1], position = entry_args[2];
    if (have_index) {
        if (relative_offset < INT32_MIN || relative_offset > INT32_MAX || position < INT32_MIN
            || position > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError,
                            "relative_offset or position out of int32 range");
            return NULL;
        }
        if (PyObject_GetBuffer(args[5], &index, PyBUF_WRITABLE) < 0) return NULL;
        if (slot < 0 || slot > (long long)index.len - 8) {
            PyBuffer_Release(&index);
            PyErr_SetString(PyExc_ValueError, "index slot outside the index buffer");
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        if (have_index) PyBuffer_Release(&index);
        return NULL;
    }
    if (view.len < 17) {
        PyBuffer_Release(&view);
        if (have_index) PyBuffer_Release(&index);
        PyErr_SetString(PyExc_ValueError, "not a record batch: shorter than 17 bytes");
        return NULL;
    }
    unsigned char head[17];
    uint64_t b = (uint64_t)base_offset;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(b >> (56 - 8 * i));
    uint32_t l = (uint32_t)batch_length;
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(l >> (24 - 8 * i));
    uint32_t e = (uint32_t)leader_epoch;
    for (int i = 0; i < 4; i++) head[12 + i] = (unsigned char)(e >> (24 - 8 * i));
    head[16] = CURRENT_MAGIC;
    struct iovec iov[2] = {{head, 17}, {(unsigned char *)view.buf + 17, (size_t)view.len - 17}};
    ssize_t written;
    int err = 0;
    do {
        Py_BEGIN_ALLOW_THREADS
        written = writev(fd, iov, 2);
        err = errno;
        /* The entry is stored without the GIL too: the export keeps the mapping, and
         * the store may fault (a page cleaned by writeback is write-protected again),
         * which should not stop the other threads. */
        if (have_index && written == view.len) {
            unsigned char *entry = (unsigned char *)index.buf + slot;
            uint32_t r = (uint32_t)relative_offset, q = (uint32_t)position;
            for (int i = 0; i < 4; i++) entry[i] = (unsigned char)(r >> (24 - 8 * i));
            for (int i = 0; i < 4; i++) entry[4 + i] = (unsigned char)(q >> (24 - 8 * i));
        }
        Py_END_ALLOW_THREADS
    } while (written < 0 && err == EINTR && !PyErr_CheckSignals());
    if (have_index) PyBuffer_Release(&index);
    PyBuffer_Release(&view);
    if (written < 0) {
        if (!PyErr_Occurred()) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        return NULL;
    }
    return PyLong_FromSsize_t(written);
}

static PyObject *py_crc32c(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    unsigned long crc = 0;
    if (nargs == 2) {
        crc = PyLong_AsUnsignedLong(args[1]);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t r = crc32c((uint32_t)crc, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

static PyObject *py_crc32c_sw(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t r = ~crc_sw(~0u, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

static PyMethodDef methods[] = {
    {"single_batch", single_batch, METH_O,
     "Header fields if the buffer is exactly one valid client batch, else None."},
    {"write_batch", (PyCFunction)(void (*)(void))write_batch, METH_FASTCALL,
     "writev the batch with base offset, leader epoch and magic set; bytes written."},
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL,
     "CRC-32C of a buffer, continuing from crc."},
    {"crc32c_table", py_crc32c_sw, METH_O,
     "CRC-32C of a buffer by the table, as on a CPU without SSE4.2 (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batch_fast", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__batch_fast(void) {
    build_tables();
#if HW_POSSIBLE
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", have_hw) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
