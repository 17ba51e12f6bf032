/* The single-batch hot path of a leader append, in C (actors/core/batch_fast.py).
 *
 * Two functions with the exact behaviour of their pure-Python twins in
 * actors/core/batch_fast.py (tests/core/test_batch_fast.py runs both on the same
 * inputs):
 *
 *   single_batch(buffer) -> tuple | None
 *       The 13 header fields of the buffer if it is exactly one valid client
 *       batch (length, magic 2, offset range and record count, no control
 *       bit, producer and transaction rules, CRC-32C) stamped CreateTime, else
 *       None (a client's LogAppendTime bit: the general path rewrites it).
 *   write_batch(fd, buffer, base_offset, batch_length, leader_epoch
 *               [, index, slot, relative_offset, position]) -> int
 *       One writev of the batch with its first 17 bytes replaced by base
 *       offset, batch length, leader epoch and magic 2: the bytes written
 *       (maybe fewer than all), or OSError. With an index (a writable buffer,
 *       the active segment's mapped offset index), once the whole batch is
 *       written the entry (relative offset, position) goes at byte ``slot``
 *       of it, as OffsetIndex.entry packs it; not after a short write.
 *
 * And two base classes, IndexCore and SegmentCore (below), whose
 * SegmentCore.append_one is the active segment's whole single-batch append.
 *
 * CRC-32C (Castagnoli, reflected, as Kafka's): on x86-64 with SSE4.2 three
 * independent crc32 instruction streams over adjacent blocks, joined by
 * multiplying by x^(8*block) (tables built at import); else a table per byte.
 * Where the CPU has AVX-512 VPCLMULQDQ, 256 bytes or more by carry-less folding
 * (crc_fold, CRC_FOLD), checked against the table at import.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21
#define CURRENT_MAGIC 2
#define TIMESTAMP_TYPE_BIT 0x08 /* LogAppendTime */
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
/* The crc32 instruction over what is left: eight bytes a step, then one (the streams' and
 * the fold's tail). */
__attribute__((target("sse4.2"))) static inline uint32_t crc_words(uint64_t c,
                                                                   const unsigned char *p,
                                                                   size_t n) {
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t r = (uint32_t)c;
    while (n--) r = __builtin_ia32_crc32qi(r, *p++);
    return r;
}

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
    return crc_words(c0, p, n);
}
#else
#define HW_POSSIBLE 0
#endif

#if HW_POSSIBLE && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define FOLD_POSSIBLE 1
#include <immintrin.h>
/* CRC-32C by carry-less multiplication (AVX-512 VPCLMULQDQ), where the CPU has it: the
 * crc32 instruction takes 8 bytes a cycle at best (one a cycle, three streams to cover
 * its latency), ~2,300 cycles for a 16 KiB batch, about half the log's own CPU per
 * append in `bench log`; folding 64 bytes per multiply pair takes a quarter of that.
 *
 * The register (reflected) is XORed into the first 4 bytes; four 64-byte accumulators
 * then each move 256 bytes ahead a round: a 128-bit lane L (its first 8 bytes lo, the
 * higher degree in the reflected order, then hi) becomes lo * k_lo ^ hi * k_hi, which
 * is congruent mod P to L moved D bits on (k = x^(D +- 32) mod P, reflected and shifted
 * one, as in Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ").
 * The accumulators fold into one, its four lanes into one, and that last 16 bytes goes
 * through the crc32 instruction from a zero register; the rest (under 64 bytes) too.
 * The constants are worked out at import and the whole path is checked there against
 * the table on fixed data (every fold length and tail): any mismatch and it is not used. */
static int have_fold;
static uint64_t fold_k[3][2]; /* moves of 2048, 512 and 128 bits: (k_lo, k_hi) */

static uint64_t xpow_mod(unsigned e) {  /* x^e mod P, reflected, shifted left one */
    uint32_t r = 0x80000000u;            /* x^0 */
    while (e--) r = (r >> 1) ^ (POLY & (0u - (r & 1)));
    return (uint64_t)r << 1;
}

__attribute__((target("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.2")))
static inline __m512i fold512(__m512i acc, __m512i k, __m512i next) {
    __m512i a = _mm512_clmulepi64_epi128(acc, k, 0x00);
    __m512i b = _mm512_clmulepi64_epi128(acc, k, 0x11);
    return _mm512_ternarylogic_epi64(a, b, next, 0x96);  /* a ^ b ^ next */
}

__attribute__((target("pclmul,sse4.2")))
static inline __m128i fold128(__m128i acc, __m128i k, __m128i next) {
    __m128i a = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i b = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(a, b), next);
}

/* n >= 256 */
__attribute__((target("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.2")))
static uint32_t crc_fold(uint32_t reg, const unsigned char *p, size_t n) {
    __m512i x0 = _mm512_loadu_si512((const void *)p);
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 192));
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)reg)));
    p += 256;
    n -= 256;
    const __m512i k2048 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)fold_k[0][1], (long long)fold_k[0][0]));
    while (n >= 256) {
        _mm_prefetch((const char *)p + 1024, _MM_HINT_T0);
        _mm_prefetch((const char *)p + 1088, _MM_HINT_T0);
        _mm_prefetch((const char *)p + 1152, _MM_HINT_T0);
        _mm_prefetch((const char *)p + 1216, _MM_HINT_T0);
        x0 = fold512(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = fold512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = fold512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = fold512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    const __m512i k512 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)fold_k[1][1], (long long)fold_k[1][0]));
    x1 = fold512(x0, k512, x1);
    x2 = fold512(x1, k512, x2);
    x3 = fold512(x2, k512, x3);
    while (n >= 64) {
        x3 = fold512(x3, k512, _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    const __m128i k128 = _mm_set_epi64x((long long)fold_k[2][1], (long long)fold_k[2][0]);
    __m128i a = _mm512_extracti32x4_epi32(x3, 0);
    a = fold128(a, k128, _mm512_extracti32x4_epi32(x3, 1));
    a = fold128(a, k128, _mm512_extracti32x4_epi32(x3, 2));
    a = fold128(a, k128, _mm512_extracti32x4_epi32(x3, 3));
    uint64_t c = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(a));
    c = __builtin_ia32_crc32di(c, (uint64_t)_mm_extract_epi64(a, 1));
    return crc_words(c, p, n);
}

/* The constants, and the check of the whole path against the table (1: usable). */
static int fold_ready(void) {
    static const unsigned moves[3] = {2048, 512, 128};
    for (int i = 0; i < 3; i++) {
        fold_k[i][0] = xpow_mod(moves[i] + 32);
        fold_k[i][1] = xpow_mod(moves[i] - 32);
    }
    static unsigned char data[2048 + 64];
    uint32_t seed = 0x9E3779B9u;
    for (size_t i = 0; i < sizeof data; i++) {
        seed = seed * 1664525u + 1013904223u;
        data[i] = (unsigned char)(seed >> 24);
    }
    /* every tail after zero or one 256-byte round (and the 64-byte folds), and longer
       runs; at two alignments */
    for (size_t n = 256; n <= sizeof data; n += n < 576 ? 1 : 61) {
        for (size_t start = 0; start < 2 && start + n <= sizeof data; start++) {
            uint32_t reg = 0xFFFFFFFFu ^ (uint32_t)(n * 2654435761u);
            if (crc_fold(reg, data + start, n) != crc_sw(reg, data + start, n)) return 0;
        }
    }
    return 1;
}
#else
#define FOLD_POSSIBLE 0
#endif

/* The crc32-instruction streams (or the table): the path before CRC_FOLD, for tests. */
static uint32_t crc32c_streams(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t reg = ~crc;
#if HW_POSSIBLE
    if (have_hw) return ~crc_hw(reg, p, n);
#endif
    return ~crc_sw(reg, p, n);
}

static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n) {
#if FOLD_POSSIBLE
    if (have_fold && n >= 256) return ~crc_fold(~crc, p, n);
#endif
    return crc32c_streams(crc, p, n);
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

/* One batch's header fields (the layout of record_batch.HEADER). */
typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, producer_id;
    int32_t batch_length, leader_epoch, last_offset_delta, base_sequence, records_count;
    uint32_t crc;
    int16_t attributes, producer_epoch;
    int magic;
} BatchHead;

/* 1 if the n bytes at p are exactly one valid client batch stamped CreateTime (its CRC
   checked), its header in *h; else 0. single_batch's test, shared with log_append. */
static int parse_single(const unsigned char *p, Py_ssize_t n, BatchHead *h) {
    if (n < HEADER_SIZE) return 0;
    h->base_offset = be64(p);
    h->batch_length = be32(p + 8);
    h->leader_epoch = be32(p + 12);
    h->magic = (signed char)p[16];
    h->crc = (uint32_t)be32(p + 17);
    h->attributes = be16(p + 21);
    h->last_offset_delta = be32(p + 23);
    h->base_timestamp = be64(p + 27);
    h->max_timestamp = be64(p + 35);
    h->producer_id = be64(p + 43);
    h->producer_epoch = be16(p + 51);
    h->base_sequence = be32(p + 53);
    h->records_count = be32(p + 57);
    if ((int64_t)h->batch_length + LOG_OVERHEAD != n || h->magic != CURRENT_MAGIC
        || (int64_t)h->records_count != (int64_t)h->last_offset_delta + 1
        || (int64_t)h->last_offset_delta + 1 <= 0 || (h->attributes & CONTROL_BIT)
        || (h->attributes & TIMESTAMP_TYPE_BIT)
        || !(h->producer_id < 0 || h->base_sequence >= 0)
        || !(h->producer_id >= 0 || !(h->attributes & TRANSACTIONAL_BIT)))
        return 0;
    /* The GIL is held: a bytearray cannot change under the check. */
    return crc32c(0, p + CRC_START, (size_t)(n - CRC_START)) == h->crc;
}

static PyObject *single_batch(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    BatchHead h;
    int ok = parse_single(view.buf, view.len, &h);
    PyBuffer_Release(&view);
    if (!ok) Py_RETURN_NONE;
    long long values[13] = {h.base_offset, h.batch_length, h.leader_epoch, h.magic, h.crc,
                            h.attributes, h.last_offset_delta, h.base_timestamp,
                            h.max_timestamp, h.producer_id, h.producer_epoch,
                            h.base_sequence, h.records_count};
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
}

/* A zigzag varint at p (reading below end) into *out; the bytes read, or 0 if it runs to
   end or does not fit 64 bits (a 10th byte above 1). */
static inline Py_ssize_t zigzag_varint(const unsigned char *p, const unsigned char *end,
                                       int64_t *out) {
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end) return 0;
        unsigned char byte = p[i];
        if (i == 9 && byte > 1) return 0;
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return i + 1;
        }
    }
    return 0;
}

/* 1 if the len bytes at p are one uncompressed batch whose every record's timestamp (-1
   aside) lies in [low, high]; 0 for anything else (timestamps_within's walk). */
static int stamps_within(const unsigned char *p, Py_ssize_t len, int64_t low, int64_t high) {
    const unsigned char *end = p + len;
    if (len < HEADER_SIZE || (int64_t)be32(p + 8) + LOG_OVERHEAD != len
        || (be16(p + 21) & 0x07))
        return 0;
    int64_t base = be64(p + 27);
    int32_t count = be32(p + 57);
    const unsigned char *pos = p + HEADER_SIZE;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, delta, stamp;
        Py_ssize_t used = zigzag_varint(pos, end, &length);
        /* a record holds at least its attributes byte */
        if (!used || length < 1 || length > end - (pos + used)) return 0;
        pos += used;
        const unsigned char *record_end = pos + length;
        if (!zigzag_varint(pos + 1, record_end, &delta)) return 0; /* after attributes */
        if (__builtin_add_overflow(base, delta, &stamp)) return 0;
        if (stamp != -1 && (stamp < low || stamp > high)) return 0;
        pos = record_end;
    }
    return 1;
}

/* [now - before, now + after] clamped to int64 into *low, *high; -1 with the error
   timestamps_within raises for arguments out of range. */
static int stamp_bounds(PyObject *now_o, PyObject *before_o, PyObject *after_o,
                        int64_t *low, int64_t *high) {
    long long now = PyLong_AsLongLong(now_o);
    long long before = PyLong_AsLongLong(before_o);
    long long after = PyLong_AsLongLong(after_o);
    if ((now == -1 || before == -1 || after == -1) && PyErr_Occurred()) return -1;
    if (before < 0 || after < 0) {
        PyErr_SetString(PyExc_ValueError, "before_max_ms and after_max_ms must be >= 0");
        return -1;
    }
    /* before and after are >= 0: only now - before can fall below INT64_MIN, only
       now + after rise above INT64_MAX */
    if (__builtin_sub_overflow((int64_t)now, (int64_t)before, low)) *low = INT64_MIN;
    if (__builtin_add_overflow((int64_t)now, (int64_t)after, high)) *high = INT64_MAX;
    return 0;
}

/* timestamps_within(records, now_ms, before_max_ms, after_max_ms): True if the buffer is
   one uncompressed batch (its length matching) whose every record's timestamp (-1 aside)
   lies in [now - before, now + after] (the upper end at most INT64_MAX); False for
   anything else, which the caller's general path then judges exactly. */
static PyObject *timestamps_within(PyObject *Py_UNUSED(self), PyObject *const *args,
                                   Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "timestamps_within takes records, now_ms, "
                                         "before_max_ms, after_max_ms");
        return NULL;
    }
    int64_t low, high;
    if (stamp_bounds(args[1], args[2], args[3], &low, &high) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    int ok = stamps_within(view.buf, view.len, low, high);
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
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

static PyObject *py_crc32c_streams(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t r = crc32c_streams(0, view.buf, (size_t)view.len);
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

/* ---- The active segment's append, in one call ------------------------------------
 *
 * IndexCore and SegmentCore are base classes whose instance fields are plain object
 * slots (as a Python class's __slots__: the same attribute access from Python, fast
 * there too), so SegmentCore.append_one reads and updates a segment and its two
 * indexes without a Python frame or a dictionary lookup. log_index.py and
 * log_segment.py define the fields' meaning and a Python twin of each class
 * (IndexCorePy, SegmentCorePy, LogSegment._append_one_py) used where this module
 * is not built; tests/core/test_segment_core.py compares the two.
 *
 * append_one does the common case itself, written or staged (group commit): every
 * field an int in C's range, the index slots reserved and in range, nothing staged
 * before a write. Anything else (a write after staged ones, an index reservation, a
 * value out of range) goes to the Python method ``_append_one_py`` before anything
 * is changed, which then does exactly what the Python twin does. */

enum {
    IX_BASE_OFFSET, IX_ENTRIES, IX_MAX_ENTRIES, IX_RESERVED_ENTRIES, IX_MAP, IX_LAST_OFFSET,
    IX_LAST_POSITION, IX_LAST_TIMESTAMP, IX_FIRST_ENTRY, IX_COUNT
};
static const char *const index_fields[IX_COUNT] = {
    "base_offset", "entries", "max_entries", "reserved_entries", "_map", "last_offset",
    "last_position", "last_timestamp", "first_entry"};

enum {
    SG_FD, SG_BASE_OFFSET, SG_SIZE, SG_NEXT_OFFSET, SG_INDEX_INTERVAL, SG_SINCE_INDEX,
    SG_MAX_TIMESTAMP, SG_OFFSET_OF_MAX_TIMESTAMP, SG_FIRST_BATCH_SEEN, SG_ROLLING_TIMESTAMP,
    SG_ROLLS_ON_BATCH_TIME, SG_INDEX_FULL, SG_OFFSET_INDEX, SG_TIME_INDEX, SG_STAGED,
    SG_STAGED_BYTES, SG_UNDO, SG_COUNT
};
static const char *const segment_fields[SG_COUNT] = {
    "_fd", "base_offset", "size", "next_offset", "index_interval_bytes",
    "_bytes_since_index_entry", "_max_timestamp_ms", "_offset_of_max_timestamp",
    "_first_batch_seen", "rolling_timestamp_ms", "rolls_on_batch_time", "index_full",
    "offset_index", "time_index", "_staged", "staged_bytes", "_undo"};

typedef struct {
    PyObject_HEAD
    PyObject *f[IX_COUNT];
} IndexCore;

typedef struct {
    PyObject_HEAD
    PyObject *f[SG_COUNT];
} SegmentCore;

static PyMemberDef index_members[IX_COUNT + 1];
static PyMemberDef segment_members[SG_COUNT + 1];

static void fill_members(PyMemberDef *members, const char *const *names, int count,
                         Py_ssize_t first) {
    for (int i = 0; i < count; i++) {
        members[i].name = names[i];
        members[i].type = T_OBJECT_EX;
        members[i].offset = first + i * (Py_ssize_t)sizeof(PyObject *);
        members[i].flags = 0;
        members[i].doc = NULL;
    }
    memset(&members[count], 0, sizeof(PyMemberDef));
}

#define CORE_GC(Type, COUNT)                                                               \
    static int Type##_traverse(PyObject *self, visitproc visit, void *arg) {               \
        for (int i = 0; i < COUNT; i++) Py_VISIT(((Type *)self)->f[i]);                    \
        return 0;                                                                          \
    }                                                                                      \
    static int Type##_clear(PyObject *self) {                                              \
        for (int i = 0; i < COUNT; i++) Py_CLEAR(((Type *)self)->f[i]);                    \
        return 0;                                                                          \
    }                                                                                      \
    static void Type##_dealloc(PyObject *self) {                                           \
        PyObject_GC_UnTrack(self);                                                         \
        Type##_clear(self);                                                                \
        Py_TYPE(self)->tp_free(self);                                                      \
    }
CORE_GC(IndexCore, IX_COUNT)
CORE_GC(SegmentCore, SG_COUNT)

static PyTypeObject IndexCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "actors.core._batch_fast.IndexCore",
    .tp_basicsize = sizeof(IndexCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A mapped index's hot fields, as slots (log_index.IndexCorePy's twin).",
    .tp_traverse = IndexCore_traverse,
    .tp_clear = IndexCore_clear,
    .tp_dealloc = IndexCore_dealloc,
    .tp_members = index_members,
    .tp_new = PyType_GenericNew,
};

/* A field as a C integer: 1, or 0 if it is unset, not an exact int or out of range. */
static inline int field_ll(PyObject *o, long long *out) {
    if (o == NULL || !PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static PyObject *str_append_one_py, *str_append_failed, *str_state, *slice_from_17;

/* The offset index entry (relative offset, position) and the time index entry
 * (timestamp, relative offset), big-endian as OffsetIndex.entry and TimeIndex.entry. */
static void store_entries(Py_buffer *index, long long entries, long long relative,
                          long long position, Py_buffer *times, long long t_entries,
                          long long timestamp, long long t_relative) {
    if (index != NULL) {
        unsigned char *e = (unsigned char *)index->buf + entries * 8;
        put_be32(e, (uint32_t)relative);
        put_be32(e + 4, (uint32_t)position);
    }
    if (times != NULL) {
        unsigned char *e = (unsigned char *)times->buf + t_entries * 12;
        uint64_t ts = (uint64_t)timestamp;
        for (int i = 0; i < 8; i++) e[i] = (unsigned char)(ts >> (56 - 8 * i));
        put_be32(e + 8, (uint32_t)t_relative);
    }
}

#define FITS_INT32(v) ((v) >= INT32_MIN && (v) <= INT32_MAX)

static PyObject *delegate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *call[9];
    call[0] = self;
    for (Py_ssize_t i = 0; i < nargs; i++) call[i + 1] = args[i];
    return PyObject_VectorcallMethod(str_append_one_py, call,
                                     (size_t)(nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* append_one(records, batch_length, leader_epoch, size, base_offset, next_offset,
 *            max_timestamp[, defer]): LogSegment._append_one_py's behaviour, see there. */
static PyObject *segment_append_one(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    SegmentCore *seg = (SegmentCore *)op;
    PyObject **f = seg->f;
    if (nargs < 7 || nargs > 8) {
        PyErr_SetString(PyExc_TypeError,
                        "append_one(records, batch_length, leader_epoch, size, base_offset, "
                        "next_offset, max_timestamp[, defer])");
        return NULL;
    }
    int defer = 0;
    if (nargs == 8 && (defer = PyObject_IsTrue(args[7])) < 0) return NULL;
    long long staged_bytes = 0;
    long long batch_length, leader_epoch, size, base_offset, next_offset, max_ts;
    long long fd, seg_base, start, since, interval, cur_max_ts, cur_max_off, rolling;
    if (!(field_ll(args[1], &batch_length) && field_ll(args[2], &leader_epoch)
          && field_ll(args[3], &size) && field_ll(args[4], &base_offset)
          && field_ll(args[5], &next_offset) && field_ll(args[6], &max_ts)
          && field_ll(f[SG_FD], &fd) && field_ll(f[SG_BASE_OFFSET], &seg_base)
          && field_ll(f[SG_SIZE], &start) && field_ll(f[SG_SINCE_INDEX], &since)
          && field_ll(f[SG_INDEX_INTERVAL], &interval)
          && field_ll(f[SG_MAX_TIMESTAMP], &cur_max_ts)
          && field_ll(f[SG_OFFSET_OF_MAX_TIMESTAMP], &cur_max_off)
          && field_ll(f[SG_ROLLING_TIMESTAMP], &rolling)
          && FITS_INT32(batch_length) && FITS_INT32(leader_epoch) && FITS_INT32(fd)
          && size >= 17 && next_offset > LLONG_MIN && start <= LLONG_MAX - size
          && f[SG_STAGED] != NULL && PyList_CheckExact(f[SG_STAGED])
          && (defer ? field_ll(f[SG_STAGED_BYTES], &staged_bytes)
                          && staged_bytes <= LLONG_MAX - size && f[SG_UNDO] != NULL
                    : PyList_GET_SIZE(f[SG_STAGED]) == 0)
          && f[SG_FIRST_BATCH_SEEN] != NULL && f[SG_ROLLS_ON_BATCH_TIME] != NULL))
        return delegate(op, args, nargs);
    int first_seen = PyObject_IsTrue(f[SG_FIRST_BATCH_SEEN]);
    if (first_seen < 0) return NULL;
    int indexed = since >= interval || start == 0;
    /* The state after the batch, worked out before anything is written. */
    long long new_max_ts = cur_max_ts, new_max_off = cur_max_off;
    if (max_ts > cur_max_ts) {
        new_max_ts = max_ts;
        new_max_off = next_offset - 1;
    }
    IndexCore *index = NULL, *times = NULL;
    long long entries = 0, max_entries = 0, t_entries = 0, t_max_entries = 0, t_last_ts = 0;
    long long t_base = 0;
    int put_entry = 0, put_time = 0;
    Py_buffer index_buf = {0}, time_buf = {0};
    if (indexed) {
        PyObject *io = f[SG_OFFSET_INDEX], *to = f[SG_TIME_INDEX];
        if (io == NULL || to == NULL || !PyObject_TypeCheck(io, &IndexCoreType)
            || !PyObject_TypeCheck(to, &IndexCoreType))
            return delegate(op, args, nargs);
        index = (IndexCore *)io;
        times = (IndexCore *)to;
        long long reserved, t_reserved;
        if (!(field_ll(index->f[IX_ENTRIES], &entries)
              && field_ll(index->f[IX_MAX_ENTRIES], &max_entries)
              && field_ll(index->f[IX_RESERVED_ENTRIES], &reserved)
              && field_ll(times->f[IX_ENTRIES], &t_entries)
              && field_ll(times->f[IX_MAX_ENTRIES], &t_max_entries)
              && field_ll(times->f[IX_RESERVED_ENTRIES], &t_reserved)
              && field_ll(times->f[IX_LAST_TIMESTAMP], &t_last_ts)
              && field_ll(times->f[IX_BASE_OFFSET], &t_base)
              && entries < reserved && t_entries < t_reserved && index->f[IX_MAP] != NULL
              && times->f[IX_MAP] != NULL))
            return delegate(op, args, nargs);  /* the Python twin reserves disk first */
        long long relative = base_offset - seg_base;
        put_entry = entries < max_entries && index->f[IX_MAP] != Py_None;
        if (put_entry && !(FITS_INT32(relative) && FITS_INT32(start) && entries >= 0
                           && entries <= (LLONG_MAX - 8) / 8))
            return delegate(op, args, nargs);
        put_time = new_max_ts > t_last_ts && t_entries < t_max_entries - 1
                   && times->f[IX_MAP] != Py_None;
        if (put_time && !(FITS_INT32(new_max_off - t_base) && t_entries >= 0
                          && t_entries <= (LLONG_MAX - 12) / 12))
            return delegate(op, args, nargs);
        if (put_entry) {
            if (PyObject_GetBuffer(index->f[IX_MAP], &index_buf, PyBUF_WRITABLE) < 0) {
                PyErr_Clear();
                return delegate(op, args, nargs);
            }
            if (entries * 8 + 8 > (long long)index_buf.len) {
                PyBuffer_Release(&index_buf);
                return delegate(op, args, nargs);
            }
        }
        if (put_time) {
            int bad = PyObject_GetBuffer(times->f[IX_MAP], &time_buf, PyBUF_WRITABLE) < 0;
            if (bad) PyErr_Clear();
            else if (t_entries * 12 + 12 > (long long)time_buf.len) {
                PyBuffer_Release(&time_buf);
                bad = 1;
            }
            if (bad) {
                if (put_entry) PyBuffer_Release(&index_buf);
                return delegate(op, args, nargs);
            }
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) goto fail_buffers;
    if (view.len != size) {  /* the caller's size is the batch's: anything else, Python's way */
        PyBuffer_Release(&view);
        if (put_entry) PyBuffer_Release(&index_buf);
        if (put_time) PyBuffer_Release(&time_buf);
        return delegate(op, args, nargs);
    }
    /* The new values as objects before the write, so nothing can fail after it. */
    PyObject *o_size = NULL, *o_since = NULL, *o_max_off = NULL, *o_entries = NULL;
    PyObject *o_t_entries = NULL, *o_t_offset = NULL, *o_first = NULL, *o_t_ts = NULL;
    PyObject *o_head = NULL, *o_rest = NULL, *o_staged_bytes = NULL, *o_undo = NULL;
    o_size = PyLong_FromLongLong(start + size);
    o_since = PyLong_FromLongLong(indexed ? size : since + size);
    if (o_size == NULL || o_since == NULL) goto fail_objects;
    if (max_ts > cur_max_ts && (o_max_off = PyLong_FromLongLong(new_max_off)) == NULL)
        goto fail_objects;
    if (put_entry && (o_entries = PyLong_FromLongLong(entries + 1)) == NULL) goto fail_objects;
    if (put_time) {
        o_t_ts = max_ts > cur_max_ts ? Py_NewRef(args[6]) : Py_NewRef(f[SG_MAX_TIMESTAMP]);
        o_t_offset = max_ts > cur_max_ts ? Py_NewRef(o_max_off)
                                         : Py_NewRef(f[SG_OFFSET_OF_MAX_TIMESTAMP]);
        if ((o_t_entries = PyLong_FromLongLong(t_entries + 1)) == NULL) goto fail_objects;
        if (t_entries == 0 && (o_first = PyTuple_Pack(2, o_t_ts, o_t_offset)) == NULL)
            goto fail_objects;
    }

    unsigned char head[17];
    uint64_t b = (uint64_t)base_offset;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(b >> (56 - 8 * i));
    put_be32(head + 8, (uint32_t)batch_length);
    put_be32(head + 12, (uint32_t)leader_epoch);
    head[16] = CURRENT_MAGIC;
    if (defer) {
        /* Staged: the patched head and a view of the client's bytes after it wait for
         * write_staged's writev; _undo keeps the state from before the first of them. */
        if (f[SG_UNDO] == Py_None && (o_undo = PyObject_CallMethodNoArgs(op, str_state)) == NULL)
            goto fail_objects;
        if ((o_head = PyBytes_FromStringAndSize((const char *)head, 17)) == NULL) goto fail_objects;
        PyObject *whole = PyMemoryView_FromObject(args[0]);
        if (whole == NULL) goto fail_objects;
        o_rest = PyObject_GetItem(whole, slice_from_17);
        Py_DECREF(whole);
        if (o_rest == NULL) goto fail_objects;
        if ((o_staged_bytes = PyLong_FromLongLong(staged_bytes + size)) == NULL) goto fail_objects;
        PyObject *staged = f[SG_STAGED];
        if (PyList_Append(staged, o_head) < 0) goto fail_objects;
        if (PyList_Append(staged, o_rest) < 0) {
            Py_ssize_t n = PyList_GET_SIZE(staged);
            PyList_SetSlice(staged, n - 1, n, NULL);
            goto fail_objects;
        }
        Py_CLEAR(o_head);
        Py_CLEAR(o_rest);
        store_entries(put_entry ? &index_buf : NULL, entries, base_offset - seg_base, start,
                      put_time ? &time_buf : NULL, t_entries, new_max_ts, new_max_off - t_base);
        goto written;
    }
    struct iovec iov[2] = {{head, 17}, {(unsigned char *)view.buf + 17, (size_t)size - 17}};
    struct iovec *next = iov;
    int pieces = 2;
    Py_ssize_t done = 0;
    int err = 0;
    /* Until the whole batch is in (a regular file may take fewer bytes a call). */
    while (done < size) {
        ssize_t written;
        Py_BEGIN_ALLOW_THREADS
        written = writev((int)fd, next, pieces);
        err = errno;
        if (written >= 0 && done + written == size)  /* without the GIL, as write_batch */
            store_entries(put_entry ? &index_buf : NULL, entries, base_offset - seg_base, start,
                          put_time ? &time_buf : NULL, t_entries, new_max_ts,
                          new_max_off - t_base);
        Py_END_ALLOW_THREADS
        if (written < 0) {
            if (err == EINTR) {
                if (PyErr_CheckSignals() < 0) goto fail_write; /* as os.write: no undo */
                continue;
            }
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb != NULL) PyException_SetTraceback(value, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            PyObject *start_obj = PyLong_FromLongLong(start);
            if (start_obj != NULL) {
                /* _append_failed truncates back to start and raises StorageError. */
                PyObject *call[3] = {op, start_obj, value};
                PyObject *r = PyObject_VectorcallMethod(
                    str_append_failed, call, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
                Py_XDECREF(r);
                Py_DECREF(start_obj);
                if (r != NULL && !PyErr_Occurred())
                    PyErr_SetString(PyExc_SystemError, "_append_failed returned");
            }
            Py_DECREF(value);
            goto fail_write;
        }
        done += written;
        while (pieces && (size_t)written >= next->iov_len) {
            written -= (ssize_t)next->iov_len;
            next++;
            pieces--;
        }
        if (pieces) {
            next->iov_base = (unsigned char *)next->iov_base + written;
            next->iov_len -= (size_t)written;
        }
    }
written:
    PyBuffer_Release(&view);
    if (put_entry) PyBuffer_Release(&index_buf);
    if (put_time) PyBuffer_Release(&time_buf);

    if (defer) {
        Py_SETREF(f[SG_STAGED_BYTES], o_staged_bytes);
        if (o_undo != NULL) Py_SETREF(f[SG_UNDO], o_undo);
    }
    if (!first_seen) {
        Py_SETREF(f[SG_FIRST_BATCH_SEEN], Py_NewRef(Py_True));
        if (max_ts >= 0) {
            Py_SETREF(f[SG_ROLLING_TIMESTAMP], Py_NewRef(args[6]));
            Py_SETREF(f[SG_ROLLS_ON_BATCH_TIME], Py_NewRef(Py_True));
        }
    }
    if (max_ts > cur_max_ts) {
        Py_SETREF(f[SG_MAX_TIMESTAMP], Py_NewRef(args[6]));
        Py_SETREF(f[SG_OFFSET_OF_MAX_TIMESTAMP], o_max_off);
    }
    Py_SETREF(f[SG_NEXT_OFFSET], Py_NewRef(args[5]));
    PyObject *old_size = f[SG_SIZE];  /* start: the entry's position */
    f[SG_SIZE] = o_size;
    Py_SETREF(f[SG_SINCE_INDEX], o_since);
    if (indexed) {
        if (put_entry) {
            Py_SETREF(index->f[IX_ENTRIES], o_entries);
            Py_SETREF(index->f[IX_LAST_OFFSET], Py_NewRef(args[4]));
            Py_SETREF(index->f[IX_LAST_POSITION], Py_NewRef(old_size));
            entries++;
        }
        if (put_time) {
            if (o_first != NULL) Py_SETREF(times->f[IX_FIRST_ENTRY], o_first);
            Py_SETREF(times->f[IX_ENTRIES], o_t_entries);
            Py_SETREF(times->f[IX_LAST_TIMESTAMP], o_t_ts);
            Py_SETREF(times->f[IX_LAST_OFFSET], o_t_offset);
            t_entries++;
        }
        Py_SETREF(f[SG_INDEX_FULL], Py_NewRef(entries >= max_entries
                                              || t_entries >= t_max_entries - 1 ? Py_True
                                                                               : Py_False));
    }
    Py_DECREF(old_size);
    Py_RETURN_NONE;

fail_write:
    PyBuffer_Release(&view);
    if (put_entry) PyBuffer_Release(&index_buf);
    if (put_time) PyBuffer_Release(&time_buf);
    Py_XDECREF(o_size);
    Py_XDECREF(o_since);
    Py_XDECREF(o_max_off);
    Py_XDECREF(o_entries);
    Py_XDECREF(o_t_entries);
    Py_XDECREF(o_t_offset);
    Py_XDECREF(o_t_ts);
    Py_XDECREF(o_first);
    return NULL;
fail_objects:
    Py_XDECREF(o_size);
    Py_XDECREF(o_since);
    Py_XDECREF(o_max_off);
    Py_XDECREF(o_entries);
    Py_XDECREF(o_t_entries);
    Py_XDECREF(o_t_offset);
    Py_XDECREF(o_t_ts);
    Py_XDECREF(o_first);
    Py_XDECREF(o_head);
    Py_XDECREF(o_rest);
    Py_XDECREF(o_staged_bytes);
    Py_XDECREF(o_undo);
    PyBuffer_Release(&view);
fail_buffers:
    if (put_entry) PyBuffer_Release(&index_buf);
    if (put_time) PyBuffer_Release(&time_buf);
    return NULL;
}

static PyMethodDef segment_methods[] = {
    {"append_one", (PyCFunction)(void (*)(void))segment_append_one, METH_FASTCALL,
     "Write one checked batch and update the segment and its indexes (the hot path)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SegmentCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "actors.core._batch_fast.SegmentCore",
    .tp_basicsize = sizeof(SegmentCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A segment's hot fields, as slots, and its append (log_segment.SegmentCorePy).",
    .tp_traverse = SegmentCore_traverse,
    .tp_clear = SegmentCore_clear,
    .tp_dealloc = SegmentCore_dealloc,
    .tp_members = segment_members,
    .tp_methods = segment_methods,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------
 * log_append(log, records, leader_epoch, now_ms, defer): PartitionLog.append_as_leader's
 * inline common case (partition_log.py, its Python twin) in one call: one valid CreateTime
 * batch within _single_batch_max_bytes, of the target codec if there is one, in the
 * current leader epoch, not a transaction's first batch, no roll due, its relative offset
 * in range, no producer or a known one's next in sequence, its timestamps within the
 * topic's bounds. Then it appends as the twin does (the segment's append_one, the
 * producer's BatchMetadata, the staged entry when deferred, _unflushed_messages, the
 * flush flush.messages asks for) and returns the AppendInfo. Anything else returns None
 * having changed nothing: the caller's general path decides. Errors from what it calls
 * (the write's StorageError among them) go as they are, as from the twin.
 *
 * Why: the twin's ~20 Python lines cost ~1.7 us an append, ~35% of the log's own CPU per
 * 16 KiB append in `bench log` (measured by profile on 3.11).
 *
 * The rules are mirrored from the twin (and _maybe_roll, producer_state's sequence rule):
 * tests/core/test_log_append_fast.py runs the same appends through both. A change to what
 * log_append does or reads bumps LOG_APPEND_VERSION here and in batch_fast.py together.
 *
 * Built only for CPython 3.11-3.13 (3.11's headers checked on this machine, which has no
 * other; 3.12 and 3.13 have no cached tuple hash, 3.14 added it): it fills a tuple subclass from a bare tp_alloc, and
 * 3.14's tuple caches its hash in a field (ob_hash, -1 for not computed) that a zero-filled
 * object would read as hash 0; and it uses the private _PyType_Lookup. Elsewhere the module
 * has no log_append and the log runs the Python twin. */
#define LOG_APPEND_VERSION 2
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define HAVE_LOG_APPEND 1
#else
#define HAVE_LOG_APPEND 0
#endif
#if HAVE_LOG_APPEND

enum {
    LA_SINGLE_MAX, LA_EPOCH_CACHE, LA_ENTRIES, LA_CONFIG, LA_SEGMENT_BYTES, LA_SEGMENT_MS,
    LA_FLUSH_MESSAGES, LA_BOUNDS, LA_SEGMENTS, LA_TARGET_CODEC, LA_TXN_INDEX, LA_ONGOING,
    LA_PRODUCER_STATE, LA_PRODUCERS, LA_PRODUCER_EPOCH, LA_BATCHES, LA_LAST_SEQ,
    LA_ON_STAGED_WRITTEN, LA_STAGED_WRITTEN, LA_STAGED_ENTRIES, LA_UNFLUSHED, LA_LOG_START,
    LA_FLUSH_APPENDED, LA_APPEND_ONE, LA_APPEND, LA_NEXT_OFFSET, LA_SIZE, LA_BASE_OFFSET,
    LA_ROLLS_ON_BATCH_TIME, LA_ROLLING_TIMESTAMP, LA_INDEX_FULL, LA_COUNT
};
static const char *const la_names[LA_COUNT] = {
    "_single_batch_max_bytes", "epoch_cache", "entries", "_config", "segment_bytes",
    "segment_ms", "flush_messages", "_timestamp_bounds", "segments", "_target_codec",
    "txn_index", "ongoing", "producer_state", "producers", "producer_epoch", "batches",
    "last_seq", "on_staged_written", "_staged_written", "_staged_entries",
    "_unflushed_messages", "_log_start_offset", "_flush_appended", "append_one", "append",
    "next_offset", "size", "base_offset", "rolls_on_batch_time", "rolling_timestamp_ms",
    "index_full"};
static PyObject *la_str[LA_COUNT];
static PyObject *append_info_type, *batch_metadata_type;
static PyObject *segment_append_one_descr;  /* SegmentCore.append_one (a strong reference) */

#define COMPRESSION_MASK 0x07
#define UNDEFINED_EPOCH (-1)
#define MAX_RELATIVE_OFFSET INT32_MAX

/* o's attribute as a C integer: 1; 0 if it is not an exact int in range (the general path
 * then); -1 with an error (as the twin's attribute read). */
static int attr_ll(PyObject *o, int name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, la_str[name]);
    if (v == NULL) return -1;
    int ok = field_ll(v, out);
    Py_DECREF(v);
    return ok;
}

/* A SegmentCore's field straight from its slot (the caller checked the type); an unset
   slot by its attribute, for the AttributeError the twin would raise. */
static PyObject *seg_get(PyObject *segment, int slot, int name) {
    PyObject *v = ((SegmentCore *)segment)->f[slot];
    if (v != NULL) return Py_NewRef(v);
    return PyObject_GetAttr(segment, la_str[name]);
}

static int seg_ll(PyObject *segment, int slot, int name, long long *out) {
    PyObject *v = seg_get(segment, slot, name);
    if (v == NULL) return -1;
    int ok = field_ll(v, out);
    Py_DECREF(v);
    return ok;
}

static int seg_true(PyObject *segment, int slot, int name) {
    PyObject *v = seg_get(segment, slot, name);
    if (v == NULL) return -1;
    int truth = PyObject_IsTrue(v);
    Py_DECREF(v);
    return truth;
}

static PyObject *log_append_types(PyObject *Py_UNUSED(self), PyObject *const *args,
                                  Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])
        || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "log_append_types(AppendInfo, BatchMetadata): AppendInfo a tuple type");
        return NULL;
    }
    Py_XSETREF(append_info_type, Py_NewRef(args[0]));
    Py_XSETREF(batch_metadata_type, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyObject *log_append(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "log_append(log, records, leader_epoch, now_ms, defer)");
        return NULL;
    }
    if (append_info_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "log_append_types was not called");
        return NULL;
    }
    PyObject *log = args[0], *records = args[1], *epoch_o = args[2], *now_o = args[3];
    PyObject *defer_o = args[4];
    int defer = PyObject_IsTrue(defer_o);
    if (defer < 0) return NULL;
    long long max_bytes, leader_epoch, latest = UNDEFINED_EPOCH, first_offset, next_offset;
    long long v;
    int r;
    Py_ssize_t n = PyObject_Size(records);
    if (n < 0) return NULL;
    if ((r = attr_ll(log, LA_SINGLE_MAX, &max_bytes)) <= 0) return r < 0 ? NULL : Py_NewRef(Py_None);
    if (n > max_bytes) Py_RETURN_NONE;

    PyObject *result = NULL;  /* NULL: an error; Py_None: the general path */
    PyObject *tmp = NULL, *tmp2 = NULL, *config = NULL, *bounds = NULL, *active = NULL;
    PyObject *entry = NULL, *batches = NULL, *pid_o = NULL;
    PyObject *o_bl = NULL, *o_size = NULL, *o_first = NULL, *o_next = NULL, *o_last = NULL;
    PyObject *o_max_ts = NULL, *o_count = NULL, *info = NULL;
    BatchHead h;
    Py_buffer view;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0) return NULL;
    int have_view = 1;
#define LA_TRY(call) do { if ((r = (call)) < 0) goto done; if (r == 0) goto general; } while (0)
#define LA_GET(var, expr) do { if (((var) = (expr)) == NULL) goto done; } while (0)
    if (!parse_single(view.buf, view.len, &h)) goto general;
    LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_EPOCH_CACHE]));
    LA_GET(tmp2, PyObject_GetAttr(tmp, la_str[LA_ENTRIES]));
    Py_CLEAR(tmp);
    if ((r = PyObject_IsTrue(tmp2)) < 0) goto done;
    if (r) {
        LA_GET(tmp, PySequence_GetItem(tmp2, -1));
        Py_CLEAR(tmp2);
        LA_GET(tmp2, PySequence_GetItem(tmp, 0));
        Py_CLEAR(tmp);
        if (!field_ll(tmp2, &latest)) goto general;
    }
    Py_CLEAR(tmp2);
    LA_GET(config, PyObject_GetAttr(log, la_str[LA_CONFIG]));
    LA_GET(bounds, PyObject_GetAttr(log, la_str[LA_BOUNDS]));
    LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_SEGMENTS]));
    LA_GET(active, PySequence_GetItem(tmp, -1));
    Py_CLEAR(tmp);
    /* a segment of another class (none in the broker) goes the general way */
    if (!PyObject_TypeCheck(active, &SegmentCoreType)) goto general;
    LA_TRY(seg_ll(active, SG_NEXT_OFFSET, LA_NEXT_OFFSET, &first_offset));
    if (__builtin_add_overflow(first_offset, (long long)h.last_offset_delta + 1, &next_offset))
        goto general;
    /* the target codec, if any */
    LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_TARGET_CODEC]));
    if (tmp != Py_None && !(field_ll(tmp, &v) && (h.attributes & COMPRESSION_MASK) == v))
        goto general;
    Py_CLEAR(tmp);
    /* the current leader epoch */
    if (!field_ll(epoch_o, &leader_epoch) || leader_epoch != latest) goto general;
    /* not a transaction's first batch here (the general path opens it) */
    if (h.attributes & TRANSACTIONAL_BIT) {
        LA_GET(pid_o, PyLong_FromLongLong(h.producer_id));
        LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_TXN_INDEX]));
        LA_GET(tmp2, PyObject_GetAttr(tmp, la_str[LA_ONGOING]));
        Py_CLEAR(tmp);
        LA_TRY(PySequence_Contains(tmp2, pid_o));
        Py_CLEAR(tmp2);
    }
    /* no roll due (the general path decides) */
    long long active_size;
    LA_TRY(seg_ll(active, SG_SIZE, LA_SIZE, &active_size));
    if (active_size) {
        long long limit, grown, rolling, age;
        LA_TRY(attr_ll(config, LA_SEGMENT_BYTES, &limit));
        if (__builtin_add_overflow(active_size, (long long)n, &grown) || grown > limit)
            goto general;
        if ((r = seg_true(active, SG_ROLLS_ON_BATCH_TIME, LA_ROLLS_ON_BATCH_TIME)) < 0)
            goto done;
        if (!r) goto general;
        LA_TRY(seg_ll(active, SG_ROLLING_TIMESTAMP, LA_ROLLING_TIMESTAMP, &rolling));
        LA_TRY(attr_ll(config, LA_SEGMENT_MS, &limit));
        if (__builtin_sub_overflow((long long)h.max_timestamp, rolling, &age) || age > limit)
            goto general;
        if ((r = seg_true(active, SG_INDEX_FULL, LA_INDEX_FULL)) < 0) goto done;
        if (r) goto general;
    }
    /* the last offset relative to the segment's base within int32 */
    long long segment_base, relative;
    LA_TRY(seg_ll(active, SG_BASE_OFFSET, LA_BASE_OFFSET, &segment_base));
    if (__builtin_sub_overflow(next_offset - 1, segment_base, &relative)
        || relative > MAX_RELATIVE_OFFSET)
        goto general;
    /* no producer, or a known one's next batch (not a new producer, a new epoch, a
       duplicate or a gap) */
    if (h.producer_id >= 0) {
        long long epoch, last_seq;
        if (pid_o == NULL) LA_GET(pid_o, PyLong_FromLongLong(h.producer_id));
        LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_PRODUCER_STATE]));
        LA_GET(tmp2, PyObject_GetAttr(tmp, la_str[LA_PRODUCERS]));
        Py_CLEAR(tmp);
        if (!PyDict_CheckExact(tmp2)) goto general;
        entry = PyDict_GetItemWithError(tmp2, pid_o);
        if (entry == NULL) {
            if (PyErr_Occurred()) goto done;
            goto general;
        }
        Py_INCREF(entry);
        Py_CLEAR(tmp2);
        LA_TRY(attr_ll(entry, LA_PRODUCER_EPOCH, &epoch));
        if (epoch != h.producer_epoch) goto general;
        LA_GET(batches, PyObject_GetAttr(entry, la_str[LA_BATCHES]));
        if ((r = PyObject_IsTrue(batches)) < 0) goto done;
        if (!r) goto general;
        LA_GET(tmp, PySequence_GetItem(batches, -1));
        LA_TRY(attr_ll(tmp, LA_LAST_SEQ, &last_seq));
        Py_CLEAR(tmp);
        if ((long long)h.base_sequence != last_seq + 1) goto general;
    }
    /* last (the one walk of the records): every timestamp within the topic's bounds */
    if (bounds != Py_None) {
        int64_t low, high;
        LA_GET(tmp, PySequence_GetItem(bounds, 0));
        LA_GET(tmp2, PySequence_GetItem(bounds, 1));
        if (stamp_bounds(now_o, tmp, tmp2, &low, &high) < 0) goto done;
        Py_CLEAR(tmp);
        Py_CLEAR(tmp2);
        if (!stamps_within(view.buf, view.len, low, high)) goto general;
    }
    PyBuffer_Release(&view);
    have_view = 0;

    /* The append itself, as the twin: from here on nothing goes to the general path. */
    LA_GET(o_bl, PyLong_FromLong(h.batch_length));
    LA_GET(o_size, PyLong_FromSsize_t(n));
    LA_GET(o_first, PyLong_FromLongLong(first_offset));
    LA_GET(o_next, PyLong_FromLongLong(next_offset));
    LA_GET(o_last, PyLong_FromLongLong(next_offset - 1));
    LA_GET(o_max_ts, PyLong_FromLongLong(h.max_timestamp));
    LA_GET(o_count, PyLong_FromLong(h.records_count));
    if (defer) {
        LA_GET(tmp, PyObject_GetAttr(active, la_str[LA_ON_STAGED_WRITTEN]));
        if (tmp == Py_None) {
            LA_GET(tmp2, PyObject_GetAttr(log, la_str[LA_STAGED_WRITTEN]));
            if (PyObject_SetAttr(active, la_str[LA_ON_STAGED_WRITTEN], tmp2) < 0) goto done;
            Py_CLEAR(tmp2);
        }
        Py_CLEAR(tmp);
    }
    {
        PyObject *call[9] = {active, records, o_bl, epoch_o, o_size, o_first, o_next,
                             o_max_ts, defer_o};
        /* SegmentCore's own append_one straight (no method lookup and call), unless the
           segment's class has another (a test's twin). An append_one set on the instance
           is not honoured (the twin would call it); nothing sets one. */
        if (_PyType_Lookup(Py_TYPE(active), la_str[LA_APPEND_ONE]) == segment_append_one_descr)
            tmp = segment_append_one(active, call + 1, 8);
        else
            tmp = PyObject_VectorcallMethod(la_str[LA_APPEND_ONE], call,
                                            9 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (tmp == NULL) goto done;
        Py_CLEAR(tmp);
    }
    if (entry != NULL) {
        PyObject *o_first_seq = PyLong_FromLong(h.base_sequence);
        PyObject *o_last_seq = PyLong_FromLong(
            (long)(((int64_t)h.base_sequence + h.last_offset_delta) & 0x7FFFFFFF));
        if (o_first_seq != NULL && o_last_seq != NULL) {
            PyObject *fields[5] = {o_first_seq, o_last_seq, o_first, o_last, o_max_ts};
            tmp = PyObject_Vectorcall(batch_metadata_type, fields, 5, NULL);
        }
        Py_XDECREF(o_first_seq);
        Py_XDECREF(o_last_seq);
        if (tmp == NULL) goto done;
        PyObject *call[2] = {batches, tmp};
        LA_GET(tmp2, PyObject_VectorcallMethod(la_str[LA_APPEND], call,
                                               2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
        Py_CLEAR(tmp);
        Py_CLEAR(tmp2);
        if (defer) {
            LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_STAGED_ENTRIES]));
            PyObject *call2[2] = {tmp, entry};
            LA_GET(tmp2, PyObject_VectorcallMethod(la_str[LA_APPEND], call2,
                                                   2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
            Py_CLEAR(tmp);
            Py_CLEAR(tmp2);
        }
    }
    /* _unflushed_messages += records_count */
    LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_UNFLUSHED]));
    LA_GET(tmp2, PyNumber_InPlaceAdd(tmp, o_count));
    Py_CLEAR(tmp);
    if (PyObject_SetAttr(log, la_str[LA_UNFLUSHED], tmp2) < 0) goto done;
    LA_GET(tmp, PyObject_GetAttr(log, la_str[LA_LOG_START]));
    /* AppendInfo(first, last, max timestamp, -1, log start, records, bytes, False), built as
       tuple.__new__ builds a tuple subclass (no NamedTuple __new__ frame) */
    LA_GET(info, ((PyTypeObject *)append_info_type)->tp_alloc((PyTypeObject *)append_info_type, 8));
    {
        PyObject *items[8] = {o_first, o_last, o_max_ts, NULL, tmp, o_count, o_size, Py_False};
        LA_GET(items[3], PyLong_FromLong(-1));
        for (int i = 0; i < 8; i++)
            PyTuple_SET_ITEM(info, i, i == 3 ? items[i] : Py_NewRef(items[i]));
    }
    Py_CLEAR(tmp);
    /* the flush flush.messages asks for */
    LA_GET(tmp, PyObject_GetAttr(config, la_str[LA_FLUSH_MESSAGES]));
    if ((r = PyObject_RichCompareBool(tmp2, tmp, Py_GE)) < 0) goto done;
    Py_CLEAR(tmp);
    Py_CLEAR(tmp2);
    if (r) {
        PyObject *call[3] = {log, now_o, info};
        LA_GET(tmp, PyObject_VectorcallMethod(la_str[LA_FLUSH_APPENDED], call,
                                              3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
        Py_CLEAR(tmp);
    }
    result = info;
    info = NULL;
    goto done;
general:
    result = Py_NewRef(Py_None);
done:
#undef LA_TRY
#undef LA_GET
    if (have_view) PyBuffer_Release(&view);
    Py_XDECREF(tmp);
    Py_XDECREF(tmp2);
    Py_XDECREF(config);
    Py_XDECREF(bounds);
    Py_XDECREF(active);
    Py_XDECREF(entry);
    Py_XDECREF(batches);
    Py_XDECREF(pid_o);
    Py_XDECREF(o_bl);
    Py_XDECREF(o_size);
    Py_XDECREF(o_first);
    Py_XDECREF(o_next);
    Py_XDECREF(o_last);
    Py_XDECREF(o_max_ts);
    Py_XDECREF(o_count);
    Py_XDECREF(info);
    return result;
}

/* ------------------------------------------------------------------------------------
 * LogCore: PartitionLog's base class where log_append is built, whose append_as_leader is
 * the Python twin's entry (PartitionLog._append_as_leader_py) in C, so the common case
 * runs without a Python frame: refused or general (a failed write not told yet, a
 * coordinator append, arguments it does not take by name) it calls the twin with the
 * same arguments; else log_append, and the twin's general part (_append_general) when
 * that says None. partition_log's ``_log_append`` set to anything but log_append (tests
 * set None) sends every call to the twin, as the twin itself then runs its inline path.
 * Why: the Python frame of the entry was ~0.2 us of ~2 us the log adds to a 16 KiB
 * append's ~6 us write in `bench log`. */
static PyObject *str_append_py, *str_append_general, *str_commit_error, *str_log_append_name;
static PyObject *str_coordinator, *str_defer;
static PyObject *log_globals;       /* partition_log's module dict (its _log_append) */
static PyObject *log_append_func;   /* this module's log_append (the switch's "on") */

static PyObject *core_to_twin(PyObject *self, PyObject *name, PyObject *const *args,
                              size_t nargsf, PyObject *kwnames) {
    PyObject *bound = PyObject_GetAttr(self, name);
    if (bound == NULL) return NULL;
    PyObject *r = PyObject_Vectorcall(bound, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(bound);
    return r;
}

static PyObject *core_append_as_leader(PyObject *self, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* records, leader_epoch, now_ms, coordinator=False, defer=False */
    PyObject *a[5] = {NULL, NULL, NULL, Py_False, Py_False};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 3 || nargs > 5 || log_globals == NULL)
        return core_to_twin(self, str_append_py, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < nargs; i++) a[i] = args[i];
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int slot;
        if (key == str_defer) slot = 4;
        else if (key == str_coordinator) slot = 3;
        else return core_to_twin(self, str_append_py, args, nargsf, kwnames);
        if (slot < nargs) return core_to_twin(self, str_append_py, args, nargsf, kwnames);
        a[slot] = args[nargs + i];
    }
    PyObject *on = PyDict_GetItemWithError(log_globals, str_log_append_name);
    if (on == NULL && PyErr_Occurred()) return NULL;
    if (on != log_append_func) return core_to_twin(self, str_append_py, args, nargsf, kwnames);
    PyObject *error = PyObject_GetAttr(self, str_commit_error);
    if (error == NULL) return NULL;
    Py_DECREF(error);  /* compared by identity only: the attribute still holds it */
    if (error != Py_None)  /* the twin refuses a failed write first, as it always did */
        return core_to_twin(self, str_append_py, args, nargsf, kwnames);
    int coordinator = PyObject_IsTrue(a[3]);
    if (coordinator < 0) return NULL;
    if (coordinator) return core_to_twin(self, str_append_py, args, nargsf, kwnames);
    PyObject *call[5] = {self, a[0], a[1], a[2], a[4]};
    PyObject *done = log_append(NULL, call, 5);
    if (done != Py_None) return done;  /* the AppendInfo, or NULL with the error */
    Py_DECREF(done);
    PyObject *general[5] = {self, a[0], a[1], a[2], a[3]};
    return PyObject_VectorcallMethod(str_append_general, general,
                                     5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* log_core_register(globals): partition_log's module dict, read for its _log_append. */
static PyObject *log_core_register(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "log_core_register(the partition_log module's dict)");
        return NULL;
    }
    Py_XSETREF(log_globals, Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyMethodDef log_core_methods[] = {
    {"append_as_leader", (PyCFunction)(void (*)(void))core_append_as_leader,
     METH_FASTCALL | METH_KEYWORDS,
     "PartitionLog._append_as_leader_py's entry in C: see there."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LogCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "actors.core._batch_fast.LogCore",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "PartitionLog's base where log_append is built: append_as_leader's entry in C.",
    .tp_methods = log_core_methods,
    .tp_new = PyType_GenericNew,
};
#endif /* HAVE_LOG_APPEND */

static PyMethodDef methods[] = {
    {"single_batch", single_batch, METH_O,
     "Header fields if the buffer is exactly one valid client batch without the "
     "LogAppendTime bit, else None."},
    {"write_batch", (PyCFunction)(void (*)(void))write_batch, METH_FASTCALL,
     "writev the batch with base offset, leader epoch and magic set; bytes written."},
    {"timestamps_within", (PyCFunction)(void (*)(void))timestamps_within, METH_FASTCALL,
     "True if one uncompressed batch's record timestamps all lie within the bounds."},
#if HAVE_LOG_APPEND
    {"log_append", (PyCFunction)(void (*)(void))log_append, METH_FASTCALL,
     "PartitionLog.append_as_leader's common case: its AppendInfo, or None for the "
     "general path (nothing changed)."},
    {"log_append_types", (PyCFunction)(void (*)(void))log_append_types, METH_FASTCALL,
     "Set the AppendInfo and BatchMetadata types log_append builds."},
    {"log_core_register", log_core_register, METH_O,
     "Give LogCore.append_as_leader the partition_log module's dict (its _log_append)."},
#endif
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL,
     "CRC-32C of a buffer, continuing from crc."},
    {"crc32c_streams", py_crc32c_streams, METH_O,
     "CRC-32C of a buffer by the crc32 instruction's streams (the table without SSE4.2), "
     "not by CRC_FOLD's multiplication (for tests)."},
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
#if FOLD_POSSIBLE
    have_fold = have_hw && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f")
                && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq")
                && fold_ready();
#endif
    fill_members(index_members, index_fields, IX_COUNT, offsetof(IndexCore, f));
    fill_members(segment_members, segment_fields, SG_COUNT, offsetof(SegmentCore, f));
    if (PyType_Ready(&IndexCoreType) < 0 || PyType_Ready(&SegmentCoreType) < 0) return NULL;
    str_append_one_py = PyUnicode_InternFromString("_append_one_py");
    str_append_failed = PyUnicode_InternFromString("_append_failed");
    str_state = PyUnicode_InternFromString("_state");
#if HAVE_LOG_APPEND
    for (int i = 0; i < LA_COUNT; i++)
        if ((la_str[i] = PyUnicode_InternFromString(la_names[i])) == NULL) return NULL;
    /* the method descriptor itself (a type's attribute read gives it back unbound) */
    segment_append_one_descr = PyObject_GetAttr((PyObject *)&SegmentCoreType,
                                                la_str[LA_APPEND_ONE]);
    if (segment_append_one_descr == NULL) return NULL;
    if (PyType_Ready(&LogCoreType) < 0) return NULL;
    str_append_py = PyUnicode_InternFromString("_append_as_leader_py");
    str_append_general = PyUnicode_InternFromString("_append_general");
    str_commit_error = PyUnicode_InternFromString("_commit_error");
    str_log_append_name = PyUnicode_InternFromString("_log_append");
    str_coordinator = PyUnicode_InternFromString("coordinator");
    str_defer = PyUnicode_InternFromString("defer");
    if (str_append_py == NULL || str_append_general == NULL || str_commit_error == NULL
        || str_log_append_name == NULL || str_coordinator == NULL || str_defer == NULL)
        return NULL;
#endif
    PyObject *seventeen = PyLong_FromLong(17);
    if (seventeen == NULL) return NULL;
    slice_from_17 = PySlice_New(seventeen, NULL, NULL);
    Py_DECREF(seventeen);
    if (str_append_one_py == NULL || str_append_failed == NULL || str_state == NULL
        || slice_from_17 == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", have_hw) < 0
        || PyModule_AddIntConstant(m, "CRC_FOLD", FOLD_POSSIBLE ? have_fold : 0) < 0
        || PyModule_AddIntConstant(m, "CRC_FOLD_BUILT", FOLD_POSSIBLE) < 0
        || PyModule_AddIntConstant(m, "LOG_APPEND_VERSION", LOG_APPEND_VERSION) < 0
        || PyModule_AddObjectRef(m, "IndexCore", (PyObject *)&IndexCoreType) < 0
        || PyModule_AddObjectRef(m, "SegmentCore", (PyObject *)&SegmentCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#if HAVE_LOG_APPEND
    log_append_func = PyObject_GetAttrString(m, "log_append");
    if (log_append_func == NULL
        || PyModule_AddObjectRef(m, "LogCore", (PyObject *)&LogCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
