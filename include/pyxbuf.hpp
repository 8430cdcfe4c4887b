// pyxbuf.hpp -- a typed, move-only C++17 view over pyxbuf.h (header-only).
//
// What it is: `pyxbuf::view<T>` acquires a pyxbuf_view of any Python array
// (classic buffer, DLPack, CUDA Array Interface, __array_interface__) with
// pyxbuf_get, checks that the items are T, and releases it exactly once in its
// destructor. It adds nothing to the ABI: everything here is inline code over
// the public C API of pyxbuf.h (and Python.h); link libpyxbuf as for C.
//
//   auto v = pyxbuf::view<const double>::get(obj);      // throws pyxbuf::error
//   for (double x : v) total += x;                      // any strides, C order
//   double y = v(1, 2);                                 // unchecked indexing
//   double z = v.at({1, 2});                            // bounds-checked
//   if (auto s = v.try_span()) use(s->data(), s->size()); // C-contiguous only
//
// Types: T is one of int8_t..int64_t, uint8_t..uint64_t, float, double, bool,
// std::complex<float>, std::complex<double>, pyxbuf::bfloat16,
// pyxbuf::float8_e4m3fn, pyxbuf::float8_e5m2, pyxbuf::float4_e2m1fn_x2,
// optionally const. The view's format must be one scalar of T's kind and size
// in native byte order ("f", "=f", "<f" on a little-endian host, "Zd" for
// std::complex<double>, any integer code of T's signedness and size: "i", "l",
// "=l", "q" ...); for pyxbuf::bfloat16 the custom type "[ml_dtypes$bfloat16]"
// (one of its alternatives, as "[jax$bf16;ml_dtypes$bfloat16]"), which is
// what ml_dtypes' bfloat16 arrays and DLPack's kDLBfloat 16 get from pyxbuf;
// likewise "[ml_dtypes$float8_e4m3fn]", "[ml_dtypes$float8_e5m2]" and, for
// PyTorch's packed float4_e2m1fn_x2, "[pyxbuf$float4_e2m1fn_x2;struct$B]". A
// view of a non-const T requests PyBUF_WRITABLE; view<const T> reads only.
// get() and try_get() request no borrow unless `flags` names one
// (PYXBUF_BORROW_SHARED / PYXBUF_BORROW_EXCLUSIVE); the nanobind and pybind11
// argument casters (pyxbuf_nanobind.hpp, pyxbuf_pybind11.hpp) do.
//
// Lifetime and threads, as for the C API: every call here -- get, try_get, the
// destructor, move assignment (which releases what it held) -- needs the GIL
// (an attached thread state). Element access reads memory only and needs no
// GIL while the view is held. A view belongs to one thread at a time. A module
// using pyxbuf does not declare per-interpreter GIL support (pyxbuf.h,
// Interpreters); PYXBUF_HPP_CONCURRENT makes this header's own state atomic
// where something else than one GIL orders its callers (see spare_view_storage).
// The pyxbuf_view lives in a heap block the view owns, at a fixed address for the
// whole acquisition (the C struct may point into itself, so it is never
// relocated): moving a view moves the pointer, the moved-from view holds
// nothing and its destructor does nothing. On a view that holds nothing
// (moved from, reset, default-constructed) call only valid(), reset(),
// assignment and the destructor; the accessors need an acquired view.
// Pointers and spans taken from a view are valid until it is released.
//
// Errors: get() throws pyxbuf::error (a std::runtime_error) whose what() is
// "ExceptionType: message" of the Python exception, which it clears. Code
// built without exceptions uses try_get(), which returns std::nullopt and
// leaves the Python exception set (as the C API does); without exceptions
// the throwing members are not declared, and element access outside the
// rules (device memory, a bad index in at()) aborts instead. Items that are
// not T (format or itemsize) raise pyxbuf.ItemTypeError, the process's one
// class deriving from TypeError and BufferError (pyxbuf.h,
// pyxbuf_item_type_error; python_type() "ItemTypeError"); memory pyxbuf
// cannot hand out as asked raises BufferError.
#ifndef PYXBUF_HPP
#define PYXBUF_HPP

#include "pyxbuf.h"

#include <atomic>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define PYXBUF_HPP_EXCEPTIONS 1
#else
#define PYXBUF_HPP_EXCEPTIONS 0
#endif

// What a view argument runs on every call (release, the storage's recycling):
// inlined where the compiler's size heuristics would leave a chain of calls.
#if defined(__GNUC__) || defined(__clang__)
#define PYXBUF_HPP_INLINE inline __attribute__((always_inline))
#else
#define PYXBUF_HPP_INLINE inline
#endif

// Everything here is hidden where the compiler can say so, as pybind11 and
// nanobind hide their namespaces: each extension module that includes this
// header keeps its own copy of its inline functions and of its one piece of
// state (detail::spare_view_storage), whatever visibility the module is built
// with. An inline variable of default visibility would be a GNU UNIQUE symbol,
// which the dynamic linker makes one object for the whole process even under
// RTLD_LOCAL: two modules built against two versions of this header, or one
// with PYXBUF_HPP_CONCURRENT and one without, would share one slot of two
// layouts.
#if defined(__GNUC__) || defined(__clang__)
#define PYXBUF_HPP_NAMESPACE pyxbuf __attribute__((visibility("hidden")))
#else
#define PYXBUF_HPP_NAMESPACE pyxbuf
#endif

namespace PYXBUF_HPP_NAMESPACE {

namespace detail {
// This extension's copy of libpyxbuf speaks C++ in its messages (the fix a
// refusal names is pyxbuf::view's, not C's): set when the extension loads,
// before any acquisition.
inline const int32_t message_binding = pyxbuf_message_binding(PYXBUF_BINDING_CXX);
} // namespace detail

// A Python exception turned into a C++ one.
class error : public std::runtime_error {
public:
    explicit error(const std::string &message, std::string python_type = "")
        : std::runtime_error(message), python_type_(std::move(python_type)) {}
    // The Python exception's type name ("BufferError", ...), or "".
    const std::string &python_type() const noexcept { return python_type_; }

private:
    std::string python_type_;
};

// One bfloat16 value as ml_dtypes, PyTorch and DLPack store it: the upper 16
// bits of an IEEE 754 binary32 (sign, 8 exponent bits, 7 mantissa bits), in
// native byte order. A plain two-byte value: every bit pattern is valid.
struct bfloat16 {
    std::uint16_t bits;

    // The exact float (every bfloat16 is one).
    float to_float() const noexcept {
        const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    explicit operator float() const noexcept { return to_float(); }
    // The nearest bfloat16 (ties to even); a NaN stays a (quiet) NaN.
    static bfloat16 from_float(float f) noexcept {
        std::uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, set the quiet bit
            return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
        u += 0x7fffu + ((u >> 16) & 1u);
        return bfloat16{static_cast<std::uint16_t>(u >> 16)};
    }
};
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable<bfloat16>::value,
              "pyxbuf::bfloat16 is two plain bytes");

namespace detail {
// The value of a small float's fields: sign, biased exponent, mantissa of
// `mbits` bits (exponent 0: subnormal).
inline float minifloat(unsigned sign, unsigned exp, unsigned man, unsigned mbits, int bias) {
    const float m = static_cast<float>(man) / static_cast<float>(1u << mbits);
    const float v = exp == 0 ? std::ldexp(m, 1 - bias)
                             : std::ldexp(1.0f + m, static_cast<int>(exp) - bias);
    return sign ? -v : v;
}
} // namespace detail

// One float8 value as ml_dtypes and PyTorch store it (the OCP 8-bit floats;
// "[ml_dtypes$float8_e4m3fn]", "[ml_dtypes$float8_e5m2]"; DLPack's
// kDLFloat8_e4m3fn / kDLFloat8_e5m2). Plain bytes: every bit pattern is valid.
// E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no infinities; S.1111.111
// is NaN, so the largest value is 448.
struct float8_e4m3fn {
    std::uint8_t bits;
    // The exact float.
    float to_float() const noexcept {
        const unsigned exp = (bits >> 3) & 0xfu, man = bits & 7u;
        if (exp == 0xfu && man == 7u) return std::numeric_limits<float>::quiet_NaN();
        return detail::minifloat(bits >> 7, exp, man, 3, 7);
    }
    explicit operator float() const noexcept { return to_float(); }
};
// E5M2: IEEE binary16's top byte (5 exponent bits, bias 15, 2 mantissa bits,
// infinities and NaNs).
struct float8_e5m2 {
    std::uint8_t bits;
    float to_float() const noexcept {
        const unsigned exp = (bits >> 2) & 0x1fu, man = bits & 3u;
        if (exp == 0x1fu)
            return man != 0 ? std::numeric_limits<float>::quiet_NaN()
                            : (bits >> 7 ? -std::numeric_limits<float>::infinity()
                                         : std::numeric_limits<float>::infinity());
        return detail::minifloat(bits >> 7, exp, man, 2, 15);
    }
    explicit operator float() const noexcept { return to_float(); }
};
// Two float4_e2m1fn values in one byte, as PyTorch's float4_e2m1fn_x2 and
// NVIDIA's __nv_fp4x2_e2m1 store them (NVFP4/MXFP4 weights): the first in
// bits 3:0, the second in bits 7:4; each 1 sign, 2 exponent bits (bias 1), 1
// mantissa bit: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}. pyxbuf reads such tensors as
// one-byte items "[pyxbuf$float4_e2m1fn_x2;struct$B]".
struct float4_e2m1fn_x2 {
    std::uint8_t bits;
    static float decode(unsigned code) noexcept {
        return detail::minifloat((code >> 3) & 1u, (code >> 1) & 3u, code & 1u, 1, 1);
    }
    float first() const noexcept { return decode(bits & 0xfu); }
    float second() const noexcept { return decode(bits >> 4); }
};
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1 &&
                  sizeof(float4_e2m1fn_x2) == 1 &&
                  std::is_trivially_copyable<float8_e4m3fn>::value &&
                  std::is_trivially_copyable<float4_e2m1fn_x2>::value,
              "pyxbuf's float8 and packed float4 types are one plain byte");

namespace detail {

// Take the pending Python exception (cleared): its type name and str().
// Needs the GIL.
inline std::pair<std::string, std::string> take_python_error() {
    std::pair<std::string, std::string> out{"", "unknown error (no Python exception set)"};
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    if (exc == nullptr) return out;
    out.first = Py_TYPE(exc)->tp_name;
    PyObject *s = PyObject_Str(exc);
    Py_DECREF(exc);
#else
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    PyErr_Fetch(&type, &value, &tb);
    if (type == nullptr) return out;
    PyErr_NormalizeException(&type, &value, &tb);
    out.first = reinterpret_cast<PyTypeObject *>(type)->tp_name;
    PyObject *s = value != nullptr ? PyObject_Str(value) : nullptr;
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
#endif
    out.second.clear();
    if (s != nullptr) {
        const char *utf8 = PyUnicode_AsUTF8(s);
        if (utf8 != nullptr) out.second = utf8;
        Py_DECREF(s);
    }
    PyErr_Clear(); // str() itself may have failed
    return out;
}

// The class of an item-type refusal (a format or itemsize that is not T's):
// pyxbuf.ItemTypeError, one class for the process deriving from TypeError and
// BufferError (pyxbuf.h, pyxbuf_item_type_error), or TypeError should it not
// be had. Needs the GIL.
inline PyObject *item_type_error() noexcept {
    PyObject *cls = pyxbuf_item_type_error();
    if (cls != nullptr) return cls;
    PyErr_Clear();
    return PyExc_TypeError;
}

[[noreturn]] inline void fail(const char *message) {
#if PYXBUF_HPP_EXCEPTIONS
    throw error(message);
#else
    std::fprintf(stderr, "pyxbuf::view: %s\n", message);
    std::abort();
#endif
}

#if PYXBUF_HPP_EXCEPTIONS
[[noreturn]] inline void throw_python_error() {
    auto e = take_python_error();
    throw error(e.first.empty() ? e.second : e.first + ": " + e.second, e.first);
}
#endif

// What a C++ item type expects of a format node.
enum class kind { signed_int, unsigned_int, floating, boolean, custom };

template <class U> struct item_traits;
#define PYXBUF_HPP_ITEM(U, K, CODE, CPLX)                                      \
    template <> struct item_traits<U> {                                        \
        static constexpr kind k = kind::K;                                     \
        static constexpr bool complex = CPLX;                                  \
        static constexpr const char *format = CODE;                            \
    };
PYXBUF_HPP_ITEM(std::int8_t, signed_int, "b", false)
PYXBUF_HPP_ITEM(std::int16_t, signed_int, "h", false)
PYXBUF_HPP_ITEM(std::int32_t, signed_int, "i", false)
PYXBUF_HPP_ITEM(std::int64_t, signed_int, "q", false)
PYXBUF_HPP_ITEM(std::uint8_t, unsigned_int, "B", false)
PYXBUF_HPP_ITEM(std::uint16_t, unsigned_int, "H", false)
PYXBUF_HPP_ITEM(std::uint32_t, unsigned_int, "I", false)
PYXBUF_HPP_ITEM(std::uint64_t, unsigned_int, "Q", false)
PYXBUF_HPP_ITEM(float, floating, "f", false)
PYXBUF_HPP_ITEM(double, floating, "d", false)
PYXBUF_HPP_ITEM(bool, boolean, "?", false)
PYXBUF_HPP_ITEM(std::complex<float>, floating, "Zf", true)
PYXBUF_HPP_ITEM(std::complex<double>, floating, "Zd", true)
#undef PYXBUF_HPP_ITEM
// A custom type of the custom-dtype proposal: `custom_id` is the "id$payload"
// one of the format's alternatives must be.
#define PYXBUF_HPP_CUSTOM_ITEM(U, FORMAT, ID)                                  \
    template <> struct item_traits<U> {                                        \
        static constexpr kind k = kind::custom;                                \
        static constexpr bool complex = false;                                 \
        static constexpr const char *format = FORMAT;                          \
        static constexpr const char *custom_id = ID;                           \
    };
PYXBUF_HPP_CUSTOM_ITEM(bfloat16, "[ml_dtypes$bfloat16]", "ml_dtypes$bfloat16")
PYXBUF_HPP_CUSTOM_ITEM(float8_e4m3fn, "[ml_dtypes$float8_e4m3fn]", "ml_dtypes$float8_e4m3fn")
PYXBUF_HPP_CUSTOM_ITEM(float8_e5m2, "[ml_dtypes$float8_e5m2]", "ml_dtypes$float8_e5m2")
PYXBUF_HPP_CUSTOM_ITEM(float4_e2m1fn_x2, "[pyxbuf$float4_e2m1fn_x2;struct$B]",
                       "pyxbuf$float4_e2m1fn_x2")
#undef PYXBUF_HPP_CUSTOM_ITEM

inline bool native_order(int32_t order) {
    const uint16_t probe = 1;
    unsigned char first;
    std::memcpy(&first, &probe, 1);
    const bool little = first == 1;
    switch (order) {
    case PYXBUF_ORDER_NATIVE:
    case PYXBUF_ORDER_STANDARD:
    case PYXBUF_ORDER_UNALIGNED: return true;
    case PYXBUF_ORDER_LITTLE: return little;
    case PYXBUF_ORDER_BIG:
    case PYXBUF_ORDER_NETWORK: return !little;
    default: return false;
    }
}

// Is `id` one of the ';'-separated alternatives of a custom node?
inline bool custom_alternative_is(const pyxbuf_format_node *n, const char *id) {
    const std::size_t id_len = std::strlen(id);
    const char *p = n->alternatives;
    const char *end = p + (n->alternatives_len > 0 ? n->alternatives_len : 0);
    while (p != nullptr && p < end) {
        const char *semi = static_cast<const char *>(std::memchr(p, ';', static_cast<std::size_t>(end - p)));
        const char *stop = semi != nullptr ? semi : end;
        if (static_cast<std::size_t>(stop - p) == id_len && std::memcmp(p, id, id_len) == 0)
            return true;
        p = semi != nullptr ? semi + 1 : end;
    }
    return false;
}

// One custom item whose alternatives name `id`: no repeat, no sub-array,
// not complex, native byte order, of `size` bytes when the parser knows it.
inline bool custom_format_matches(const pyxbuf_format &f, const char *id, std::size_t size) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(&f);
    if (f.nnodes < 2 || nodes[0].nchildren != 1 || nodes[0].first_child <= 0) return false;
    const pyxbuf_format_node *n = nodes + nodes[0].first_child;
    return n->kind == PYXBUF_FMT_CUSTOM && n->repeat == 1 && n->ndim == 0 &&
           !(n->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)) &&
           native_order(n->byte_order) &&
           (f.itemsize == -1 || f.itemsize == static_cast<int64_t>(size)) &&
           custom_alternative_is(n, id);
}

template <class U, class Tr = item_traits<U>>
bool custom_matches(const pyxbuf_format &f, std::true_type) {
    return custom_format_matches(f, Tr::custom_id, sizeof(U));
}
template <class U> bool custom_matches(const pyxbuf_format &, std::false_type) { return false; }

// Is `format` exactly U's own code ("f", "Zd", "[ml_dtypes$bfloat16]")? The
// common answer, inline and without the parser.
template <class U> inline bool format_is_own_code(const char *format) noexcept {
    const char *own = item_traits<U>::format;
    if (format == nullptr) format = "B";
    if (own[0] != '\0' && own[1] == '\0') // one character, the common case: two loads
        return format[0] == own[0] && format[1] == '\0';
    // A custom type's 20-odd characters: the C library's word-at-a-time
    // comparison, not a byte loop (5 instructions a byte).
    return std::strcmp(format, own) == 0;
}

// The one scalar item of `f`: its only node, or the payload of a custom type
// that a struct$ or buffer$ alternative resolved ("[struct$B]",
// "[mylib$x;struct$B]": any consumer may read such items as that scalar);
// nullptr otherwise.
inline const pyxbuf_format_node *single_scalar(const pyxbuf_format &f) {
    const pyxbuf_format_node *nodes = pyxbuf_format_nodes(&f);
    if ((f.flags & PYXBUF_FMTF_SINGLE_SCALAR) && f.nnodes >= 2) return nodes + 1;
    if (f.nnodes < 3 || nodes[0].nchildren != 1 || nodes[0].first_child <= 0) return nullptr;
    const pyxbuf_format_node *n = nodes + nodes[0].first_child;
    if (n->kind != PYXBUF_FMT_CUSTOM || n->repeat != 1 || n->ndim != 0 || n->nchildren != 1 ||
        n->first_child <= 0 || (n->flags & (PYXBUF_FMTN_COMPLEX | PYXBUF_FMTN_POINTER)) ||
        !native_order(n->byte_order))
        return nullptr;
    const pyxbuf_format_node *c = nodes + n->first_child;
    return c->kind == PYXBUF_FMT_SCALAR && c->repeat == 1 && c->ndim == 0 ? c : nullptr;
}

// Does `format` (NULL = "B") describe one item of type U? Pure: no Python.
// Every spelling but U's own code goes through the parser.
template <class U> bool format_matches_parsed(const char *format) {
    using tr = item_traits<U>;
    pyxbuf_format f;
    if (pyxbuf_format_parse(format, &f, nullptr) != PYXBUF_OK) return false;
    bool ok = false;
    if (tr::k == kind::custom) {
        ok = custom_matches<U>(f, std::integral_constant<bool, tr::k == kind::custom>());
    } else if (const pyxbuf_format_node *n = f.itemsize == static_cast<int64_t>(sizeof(U))
                                                 ? single_scalar(f)
                                                 : nullptr) {
        const bool cplx = (n->flags & PYXBUF_FMTN_COMPLEX) != 0;
        const int c = n->code;
        bool code_ok = false;
        switch (tr::k) {
        case kind::signed_int: code_ok = c == 'b' || c == 'h' || c == 'i' || c == 'l' ||
                                         c == 'q' || c == 'n'; break;
        case kind::unsigned_int: code_ok = c == 'B' || c == 'H' || c == 'I' || c == 'L' ||
                                           c == 'Q' || c == 'N'; break;
        case kind::floating: code_ok = c == 'f' || c == 'd'; break;
        case kind::boolean: code_ok = c == '?'; break;
        case kind::custom: break;
        }
        ok = n->kind == PYXBUF_FMT_SCALAR && code_ok && cplx == tr::complex &&
             !(n->flags & PYXBUF_FMTN_POINTER) &&
             (sizeof(U) == 1 || native_order(n->byte_order));
    }
    pyxbuf_format_clear(&f);
    return ok;
}

// Does `format` (NULL = "B") describe one item of type U?
template <class U> bool format_matches(const char *format) {
    return format_is_own_code<U>(format) || format_matches_parsed<U>(format);
}

} // namespace detail

// A contiguous run of T (C++17 has no std::span).
template <class T> class span {
public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using size_type = std::size_t;
    using iterator = T *;

    // Empty, or `size` items from `data`; then the first item, the length,
    // whether it is empty, and iteration over the items.
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

// Where the memory lives.
struct device_type {
    bool host;             // CPU memory, dereferenceable here
    int32_t type;          // PYXBUF_DL_* (PYXBUF_DL_CPU for the host); 0 if unknown
    int32_t id;            // ordinal
    const char *identifier; // pyxbuf_view.device: NULL for the host
};

// The borrow the producer granted (pyxbuf_view.ext_flags).
struct grants_type {
    bool shared;    // PYXBUF_EXT_SHARED
    bool exclusive; // PYXBUF_EXT_EXCLUSIVE
    bool tracked;   // PYXBUF_EXT_TRACKED: cooperative, not enforced
};

namespace detail {

// The heap block a view holds: the pyxbuf_view at one address for the whole
// acquisition (the C struct may point into itself, so it never moves).
struct view_storage {
    pyxbuf_view v; // written by pyxbuf_get before anything reads it
    // Shape and strides (bytes): the producer's own arrays when it gave both
    // (no copy), else `dims` (shape then strides) synthesized for a request
    // without them. Set by every acquisition.
    const Py_ssize_t *shape = nullptr;
    const Py_ssize_t *strides = nullptr;
    std::vector<Py_ssize_t> dims;
};

// One released block kept for the next view, so that a view argument costs
// no malloc/free pair per call (each extension compiling this header has its
// own: the namespace is hidden, see PYXBUF_HPP_NAMESPACE). Views are made and
// released with the GIL held. Where one GIL serializes every thread that runs
// this module, the slot is a plain pointer (a locked exchange costs ~20 ns
// that no instruction count shows: measured by make bench-args's wall clock).
// Under free-threaded CPython it is atomic, and so it is with
// PYXBUF_HPP_CONCURRENT defined before including this header, for callers
// that one GIL does not order.
#if defined(Py_GIL_DISABLED) || defined(PYXBUF_HPP_CONCURRENT)
inline std::atomic<view_storage *> spare_view_storage{nullptr};

inline view_storage *take_spare_view_storage() noexcept {
    return spare_view_storage.exchange(nullptr, std::memory_order_acquire);
}
inline bool keep_spare_view_storage(view_storage *s) noexcept {
    view_storage *none = nullptr;
    return spare_view_storage.compare_exchange_strong(none, s, std::memory_order_release,
                                                      std::memory_order_relaxed);
}
#else
inline view_storage *spare_view_storage = nullptr;

inline view_storage *take_spare_view_storage() noexcept {
    view_storage *s = spare_view_storage;
    spare_view_storage = nullptr;
    return s;
}
inline bool keep_spare_view_storage(view_storage *s) noexcept {
    if (spare_view_storage != nullptr) return false;
    spare_view_storage = s;
    return true;
}
#endif

PYXBUF_HPP_INLINE view_storage *take_view_storage() noexcept {
    view_storage *s = take_spare_view_storage();
    return s != nullptr ? s : new (std::nothrow) view_storage; // v left unwritten
}

// A block that holds no acquired view: kept for the next one, or freed.
PYXBUF_HPP_INLINE void recycle_view_storage(view_storage *s) noexcept {
    if (!keep_spare_view_storage(s)) delete s;
}

// The owner of a block whose view is acquired (storage_ptr holds no other):
// release (needs the GIL), then recycle.
struct view_storage_deleter {
    PYXBUF_HPP_INLINE void operator()(view_storage *s) const noexcept {
        pyxbuf_release(&s->v);
        recycle_view_storage(s);
    }
};

} // namespace detail

template <class T> class view;

namespace detail {

// What an argument caster made of an object (pyxbuf_nanobind.hpp,
// pyxbuf_pybind11.hpp). Needs the GIL.
enum class argument_status {
    acquired,     // `out` holds the view
    not_an_array, // pyxbuf_get raised TypeError (no buffer protocol it knows),
                  // now cleared: another overload may take the object
    refused       // an array pyxbuf could not hand out as view<T> (format,
                  // read-only, a borrow conflict, device memory ...): the
                  // Python exception is left set (pyxbuf.ItemTypeError for
                  // another item type, BufferError for the rest)
};

template <class T> argument_status load_argument(PyObject *obj, view<T> &out) noexcept;

} // namespace detail

// A typed view of a Python array's items (this header's introduction says
// it all): acquired by get()/try_get() or a binding's argument caster,
// released once by its destructor, moved but never copied.
template <class T> class view {
    static_assert(!std::is_volatile<T>::value, "pyxbuf::view<volatile T> is not supported");

public:
    // T as given, T without const, and whether the view writes (T not const).
    using element_type = T;
    using value_type = std::remove_const_t<T>;
    static constexpr bool writable = !std::is_const<T>::value;

private:
    // Heap-held (detail::view_storage) so that the pyxbuf_view never moves.
    using storage_ptr = std::unique_ptr<detail::view_storage, detail::view_storage_deleter>;
    storage_ptr s_;

    explicit view(storage_ptr s) noexcept : s_(std::move(s)) {}

    static int request(int flags) { return writable ? (flags | PyBUF_WRITABLE) : flags; }

    // A binding library's argument loader acquires into its caster's view.
    friend detail::argument_status detail::load_argument<T>(PyObject *obj, view &out) noexcept;

public:
    // The request of a view<T> argument of a nanobind or pybind11 function
    // (pyxbuf_nanobind.hpp, pyxbuf_pybind11.hpp), what pyxbuf's Rust
    // PyXBuffer asks by default: strides and a format (PyBUF_RECORDS_RO), and
    // for view<const T> a shared borrow (PYXBUF_BORROW_SHARED: nobody writes
    // while it lives), for view<T> writable memory with an exclusive borrow
    // (PyBUF_WRITABLE, added by every acquisition of a view<T>, and
    // PYXBUF_BORROW_EXCLUSIVE: only this view reads or writes). The borrow is
    // asked for, not required: a producer that ignores the bits gives a view
    // without a grant (read grants()). Host memory only (no PYXBUF_DEVICE).
    static constexpr int argument_flags =
        PyBUF_RECORDS_RO | (writable ? PYXBUF_BORROW_EXCLUSIVE : PYXBUF_BORROW_SHARED);

private:

    // Acquire; nullopt with a Python exception set on failure (nothing held).
    static std::optional<view> acquire(PyObject *obj, int flags, bool with_stream,
                                       int64_t stream) {
        storage_ptr s = acquire_storage(obj, flags, with_stream, stream);
        if (!s) return std::nullopt;
        return view(std::move(s));
    }

    // The acquisition itself: the held storage, or null with a Python
    // exception set (what a function argument's loader stores directly).
    static PYXBUF_HPP_INLINE storage_ptr acquire_storage(PyObject *obj, int flags,
                                                         bool with_stream, int64_t stream,
                                                         bool *read = nullptr) {
        detail::view_storage *block = detail::take_view_storage();
        if (block == nullptr) {
            PyErr_NoMemory();
            return nullptr;
        }
        int32_t f = static_cast<int32_t>(request(flags));
        int rc = with_stream ? pyxbuf_get_stream(obj, &block->v, f, stream)
                             : pyxbuf_get(obj, &block->v, f);
        if (rc != 0) {
            detail::recycle_view_storage(block); // nothing held
            return nullptr;
        }
        storage_ptr s(block); // released by the deleter from here on, on every path
        if (read != nullptr) *read = true; // pyxbuf read it: a refusal now is of T
        const Py_buffer &b = s->v.base;
        if (!detail::format_matches<value_type>(b.format)) {
            const char *have = b.format != nullptr ? b.format : "B";
            // An item type that is not T: pyxbuf.ItemTypeError, a TypeError (the
            // memory is fine, the argument is of the wrong kind) and a
            // BufferError, as Rust's PyXBuffer raises it.
            PyErr_Format(detail::item_type_error(),
                         "pyxbuf::view: the buffer's format is '%s', expected '%s' (%zd-byte "
                         "items); pass an array of that item type (convert it first)",
                         have, detail::item_traits<value_type>::format,
                         static_cast<Py_ssize_t>(sizeof(value_type)));
            return nullptr;
        }
        // Without PyBUF_FORMAT (format NULL: "B") a flat request (shape NULL)
        // is len unsigned bytes whatever itemsize the producer reports.
        const bool flat_bytes = b.format == nullptr && b.shape == nullptr;
        const Py_ssize_t item = flat_bytes ? 1 : b.itemsize;
        if (item != static_cast<Py_ssize_t>(sizeof(value_type))) {
            PyErr_Format(detail::item_type_error(),
                         "pyxbuf::view: itemsize %zd, expected %zd; pass an array of that item type",
                         item, static_cast<Py_ssize_t>(sizeof(value_type)));
            return nullptr;
        }
        if (writable && b.readonly) {
            PyErr_SetString(PyExc_BufferError,
                            "pyxbuf::view: read-only memory for a writable view; pass writable "
                            "memory (a copy: numpy's a.copy()), or read it through a view of "
                            "const items (a shared borrow)");
            return nullptr;
        }
        const int nd = b.ndim;
        if (b.shape != nullptr && b.strides != nullptr) {
            s->shape = b.shape;
            s->strides = b.strides;
        } else {
            s->dims.assign(2 * static_cast<std::size_t>(nd), 0);
            Py_ssize_t stride = item;
            for (int k = nd - 1; k >= 0; k--) {
                const std::size_t i = static_cast<std::size_t>(k);
                // No ND: one flat run of len bytes (shape NULL).
                s->dims[i] = b.shape != nullptr ? b.shape[k] : b.len / item;
                s->dims[i + static_cast<std::size_t>(nd)] =
                    b.strides != nullptr ? b.strides[k] : stride;
                stride *= s->dims[i];
            }
            s->shape = s->dims.data();
            s->strides = s->dims.data() + nd;
        }
        return s;
    }

    char *base_ptr() const noexcept { return static_cast<char *>(s_->v.base.buf); }

    void require_host() const {
        if (!s_) detail::fail("the view holds nothing (moved from)");
        if (!pyxbuf_view_is_host(&s_->v))
            detail::fail("device memory: copy it to the host first (pyxbuf_copy_to_host)");
    }

public:
    view() noexcept = default; // holds nothing
    view(view &&) noexcept = default;
    // Releases what this view held (needs the GIL), then takes `other`'s.
    view &operator=(view &&) noexcept = default;
    view(const view &) = delete;
    view &operator=(const view &) = delete;
    ~view() = default; // releases exactly once, through the storage deleter

    // Non-throwing acquisition: nullopt with the Python exception set.
    static std::optional<view> try_get(PyObject *obj, int flags = PyBUF_RECORDS_RO) {
        return acquire(obj, flags, false, 0);
    }
    static std::optional<view> try_get_stream(PyObject *obj, int flags, int64_t consumer_stream) {
        return acquire(obj, flags, true, consumer_stream);
    }

#if PYXBUF_HPP_EXCEPTIONS
    // Acquire or throw pyxbuf::error (the Python exception cleared).
    static view get(PyObject *obj, int flags = PyBUF_RECORDS_RO) {
        auto v = acquire(obj, flags, false, 0);
        if (!v) detail::throw_python_error();
        return std::move(*v);
    }
    // pyxbuf_get_stream: for a consumer working on `consumer_stream`.
    static view get(PyObject *obj, int flags, int64_t consumer_stream) {
        auto v = acquire(obj, flags, true, consumer_stream);
        if (!v) detail::throw_python_error();
        return std::move(*v);
    }
#endif

    // Release now (needs the GIL); the view holds nothing afterwards.
    void reset() noexcept { s_.reset(); }
    bool valid() const noexcept { return static_cast<bool>(s_); }
    explicit operator bool() const noexcept { return valid(); }

    // The C view (for the C API: pyxbuf_copy_to_host, pyxbuf_device_wait ...).
    const pyxbuf_view *c_view() const noexcept { return s_ ? &s_->v : nullptr; }
    PyObject *object() const noexcept { return s_->v.base.obj; }

    // Dimensions (0 for a scalar).
    int ndim() const noexcept { return s_->v.base.ndim; }
    // Items per dimension; always present (computed when the producer gave none).
    const Py_ssize_t *shape() const noexcept { return s_->shape; }
    // Byte strides per dimension; always present (C order when none were given).
    const Py_ssize_t *strides() const noexcept {
        return s_->strides;
    }
    Py_ssize_t shape(int dim) const noexcept { return shape()[dim]; }
    Py_ssize_t stride(int dim) const noexcept { return strides()[dim]; }
    // Number of items: the producer's len over the checked itemsize.
    std::size_t size() const noexcept {
        return static_cast<std::size_t>(s_->v.base.len) / sizeof(value_type);
    }
    // sizeof(T): the producer's itemsize (a flat PyBUF_SIMPLE view: 1).
    Py_ssize_t itemsize() const noexcept { return static_cast<Py_ssize_t>(sizeof(T)); }
    Py_ssize_t nbytes() const noexcept { return s_->v.base.len; }
    bool readonly() const noexcept { return s_->v.base.readonly != 0; }
    // The producer's format ("B" when it gave none).
    const char *format() const noexcept {
        return s_->v.base.format != nullptr ? s_->v.base.format : "B";
    }
    bool is_host() const noexcept { return pyxbuf_view_is_host(&s_->v) != 0; }
    device_type device() const noexcept {
        device_type d{is_host(), 0, 0, s_->v.device};
        pyxbuf_device dev;
        if (pyxbuf_view_device(&s_->v, &dev, nullptr) == PYXBUF_OK) {
            d.type = dev.device_type;
            d.id = dev.device_id;
        }
        return d;
    }
    grants_type grants() const noexcept {
        const int32_t g = s_->v.ext_flags;
        return {(g & PYXBUF_EXT_SHARED) != 0, (g & PYXBUF_EXT_EXCLUSIVE) != 0,
                (g & PYXBUF_EXT_TRACKED) != 0};
    }
    int32_t path() const noexcept { return s_->v.path; }
    // "native", "classic", "dlpack", ... (pyxbuf_path_name).
    const char *path_name() const noexcept { return pyxbuf_path_name(s_->v.path); }
    bool c_contiguous() const noexcept {
        return PyBuffer_IsContiguous(&s_->v.base, 'C') != 0;
    }

    // The first item's address (any layout; host or device memory).
    T *data() const noexcept { return reinterpret_cast<T *>(base_ptr()); }

    // All items when the memory is C-contiguous and on the host, else nullopt.
    std::optional<pyxbuf::span<T>> try_span() const noexcept {
        if (!s_ || !is_host() || !c_contiguous()) return std::nullopt;
        return pyxbuf::span<T>(data(), size());
    }
    // As try_span, failing (pyxbuf::error, or abort without exceptions) otherwise.
    pyxbuf::span<T> span() const {
        require_host();
        if (!c_contiguous()) detail::fail("the view is not C-contiguous");
        return pyxbuf::span<T>(data(), size());
    }

    // Unchecked indexing, any strides: one index per dimension (not checked
    // against the bounds; device memory fails).
    template <class... I> T &operator()(I... idx) const {
        static_assert((std::is_integral<I>::value && ...), "indices are integers");
        require_host();
        const Py_ssize_t is[] = {static_cast<Py_ssize_t>(idx)..., 0};
        if (static_cast<int>(sizeof...(I)) != ndim()) detail::fail("wrong number of indices");
        char *p = base_ptr();
        for (std::size_t k = 0; k < sizeof...(I); k++)
            p += is[k] * strides()[k];
        return *reinterpret_cast<T *>(p);
    }

    // Bounds-checked indexing (negative indices are errors too).
    T &at(const Py_ssize_t *indices, std::size_t n) const {
        require_host();
        if (static_cast<int>(n) != ndim()) detail::fail("wrong number of indices");
        char *p = base_ptr();
        for (std::size_t k = 0; k < n; k++) {
            if (indices[k] < 0 || indices[k] >= shape()[k]) detail::fail("index out of range");
            p += indices[k] * strides()[k];
        }
        return *reinterpret_cast<T *>(p);
    }
    T &at(std::initializer_list<Py_ssize_t> indices) const {
        return at(indices.begin(), indices.size());
    }
    T &at(const std::vector<Py_ssize_t> &indices) const {
        return at(indices.data(), indices.size());
    }

    // Every item in logical C order, whatever the strides (host memory).
    class iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using value_type = std::remove_const_t<T>;
        using difference_type = std::ptrdiff_t;
        using pointer = T *;
        using reference = T &;

        iterator() = default;
        reference operator*() const noexcept { return *reinterpret_cast<T *>(p_); }
        pointer operator->() const noexcept { return reinterpret_cast<T *>(p_); }
        iterator &operator++() noexcept {
            ++pos_;
            const int nd = static_cast<int>(idx_.size());
            for (int k = nd - 1; k >= 0; k--) {
                const std::size_t u = static_cast<std::size_t>(k);
                p_ += strides_[u];
                if (++idx_[u] < shape_[u]) return *this;
                p_ -= strides_[u] * idx_[u];
                idx_[u] = 0;
            }
            return *this;
        }
        iterator operator++(int) {
            iterator t = *this;
            ++*this;
            return t;
        }
        friend bool operator==(const iterator &a, const iterator &b) noexcept {
            return a.pos_ == b.pos_;
        }
        friend bool operator!=(const iterator &a, const iterator &b) noexcept {
            return a.pos_ != b.pos_;
        }

    private:
        friend class view;
        iterator(char *p, const Py_ssize_t *shape, const Py_ssize_t *strides, int nd,
                 std::size_t pos)
            : p_(p), shape_(shape), strides_(strides),
              idx_(static_cast<std::size_t>(nd), 0), pos_(pos) {}
        char *p_ = nullptr;
        const Py_ssize_t *shape_ = nullptr;
        const Py_ssize_t *strides_ = nullptr;
        std::vector<Py_ssize_t> idx_;
        std::size_t pos_ = 0;
    };

    // Every item in C order, whatever the strides (host memory only).
    iterator begin() const {
        require_host();
        return iterator(base_ptr(), shape(), strides(), ndim(), 0);
    }
    iterator end() const {
        require_host();
        return iterator(nullptr, shape(), strides(), 0, size());
    }
};

namespace detail {

// Never throws (nanobind's from_python is noexcept): running out of memory
// is a refusal with MemoryError set.
template <class T>
PYXBUF_HPP_INLINE argument_status load_argument(PyObject *obj, view<T> &out) noexcept {
    bool read = false;
#if PYXBUF_HPP_EXCEPTIONS
    try {
#endif
        // A swap into the empty view: the move assignment's reset() is what
        // compilers leave out of line.
        auto s = view<T>::acquire_storage(obj, view<T>::argument_flags, false, 0, &read);
        if (s) {
            out.s_.swap(s);
            return argument_status::acquired;
        }
#if PYXBUF_HPP_EXCEPTIONS
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        return argument_status::refused;
    }
#endif
    // pyxbuf_get's TypeError: no buffer protocol pyxbuf knows. An array of
    // another item type (pyxbuf.ItemTypeError, a TypeError too, raised after
    // it was read) is refused.
    if (!read && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        return argument_status::not_an_array;
    }
    return argument_status::refused;
}

} // namespace detail

} // namespace pyxbuf

#endif // PYXBUF_HPP
