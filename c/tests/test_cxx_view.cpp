// test_cxx_view.cpp -- pyxbuf.hpp: pyxbuf::view<T> over an embedded
// interpreter. Each CXX_TEST(name) is the CTest test cxx_view.<name>; the
// executable runs the case named by argv[1], or all of them without one.
#include "pyxbuf.hpp"

#include "device/emulated.h" // the tests' guarded device (not part of pyxbuf.hpp)

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        long long a_ = static_cast<long long>(a), b_ = static_cast<long long>(b);   \
        if (a_ != b_) {                                                              \
            std::fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, \
                         __LINE__, #a, #b, a_, b_);                                  \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                  \
    do {                                                                             \
        std::string h_ = (hay);                                                      \
        if (h_.find(needle) == std::string::npos) {                                  \
            std::fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, \
                         __LINE__, h_.c_str(), needle);                              \
            failures++;                                                              \
        }                                                                            \
    } while (0)

// The message of the pyxbuf::error `expr` throws; "" (and a failure) if none.
#define THROWN(expr)                                                                 \
    [&]() -> std::string {                                                           \
        try {                                                                        \
            (void)(expr);                                                            \
        } catch (const pyxbuf::error &e_) {                                          \
            CHECK(!PyErr_Occurred());                                                \
            return e_.what();                                                        \
        }                                                                            \
        std::fprintf(stderr, "%s:%d: no pyxbuf::error from %s\n", __FILE__, __LINE__, #expr); \
        failures++;                                                                  \
        return "";                                                                   \
    }()

struct test_case {
    const char *name;
    void (*fn)();
};
std::vector<test_case> &cases() {
    static std::vector<test_case> all;
    return all;
}
struct registrar {
    registrar(const char *name, void (*fn)()) { cases().push_back({name, fn}); }
};
#define CXX_TEST(name)                                                               \
    void name();                                                                     \
    registrar name##_registrar(#name, name);                                         \
    void name()

// Evaluate a Python expression (array and struct imported); new reference.
PyObject *eval(const char *expr) {
    PyObject *globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String("import array, struct", Py_file_input, globals, globals);
    Py_XDECREF(r);
    r = PyRun_String(expr, Py_eval_input, globals, globals);
    if (r == nullptr) PyErr_Print();
    Py_DECREF(globals);
    return r;
}

// A writable host exporter of n items of `format` with borrow counting.
PyObject *exporter(const char *format, Py_ssize_t n, int readonly) {
    Py_ssize_t shape[1] = {n};
    PyObject *e = pyxbuf_exporter_new(format, 1, shape, readonly, nullptr);
    if (e == nullptr) PyErr_Print();
    return e;
}

} // namespace

CXX_TEST(strided_memoryview_shape_strides_elements) {
    // array.array('f', 0..9) viewed through memoryview(...)[::2]: 5 floats, stride 8.
    PyObject *m = eval("memoryview(array.array('f', [float(i) for i in range(10)]))[::2]");
    CHECK(m != nullptr);
    {
        auto v = pyxbuf::view<const float>::get(m);
        CHECK_EQ(v.ndim(), 1);
        CHECK_EQ(v.shape(0), 5);
        CHECK_EQ(v.stride(0), 8);
        CHECK_EQ(v.size(), 5);
        CHECK_EQ(v.itemsize(), 4);
        CHECK(v.readonly() || !v.readonly());
        CHECK(std::strcmp(v.format(), "f") == 0);
        CHECK(v.device().host);
        CHECK_EQ(v.device().type, PYXBUF_DL_CPU);
        CHECK(std::strcmp(v.path_name(), "classic") == 0);
        CHECK(!v.c_contiguous());
        CHECK(!v.try_span());
        CHECK_CONTAINS(THROWN(v.span()), "not C-contiguous");
        for (Py_ssize_t i = 0; i < 5; i++) {
            CHECK(v(i) == static_cast<float>(2 * i));
            CHECK(v.at({i}) == static_cast<float>(2 * i));
        }
        CHECK_CONTAINS(THROWN(v.at({5})), "out of range");
        CHECK_CONTAINS(THROWN(v.at({-1})), "out of range");
        CHECK_CONTAINS(THROWN(v.at({0, 0})), "wrong number of indices");
        std::vector<float> seen(v.begin(), v.end());
        CHECK_EQ(seen.size(), 5);
        for (std::size_t i = 0; i < seen.size(); i++) CHECK(seen[i] == static_cast<float>(2 * i));
    }
    Py_XDECREF(m);
}

CXX_TEST(two_dimensional_strided_iteration_in_c_order) {
    // A 3x4 matrix of int32 from a 6x8 one: every other row and column.
    // memoryview cannot slice 2-D: an exporter over strided memory instead.
    static Py_ssize_t shape[2] = {3, 4};
    static Py_ssize_t strides[2] = {2 * 8 * 4, 2 * 4}; // rows 0,2,4; columns 0,2,4,6
    static std::int32_t memory[48];
    for (int i = 0; i < 48; i++) memory[i] = i;
    pyxbuf_export_desc desc{};
    desc.size = sizeof desc;
    desc.ndim = 2;
    desc.buf = memory;
    desc.format = "i";
    desc.shape = shape;
    desc.strides = strides;
    PyObject *e = pyxbuf_exporter_wrap(&desc, nullptr, nullptr);
    CHECK(e != nullptr);
    {
        auto v = pyxbuf::view<std::int32_t>::get(e, PyBUF_RECORDS);
        CHECK_EQ(v.ndim(), 2);
        CHECK_EQ(v.shape(0), 3);
        CHECK_EQ(v.shape(1), 4);
        CHECK_EQ(v.stride(0), 64);
        CHECK_EQ(v.stride(1), 8);
        CHECK_EQ(v.size(), 12);
        CHECK(!v.readonly());
        CHECK(std::strcmp(v.path_name(), "native") == 0);
        CHECK_EQ(v(2, 3), 4 * 8 + 6);
        CHECK_EQ(v.at({1, 2}), 2 * 8 + 4);
        CHECK_CONTAINS(THROWN(v.at({3, 0})), "out of range");
        std::vector<std::int32_t> seen;
        for (auto x : v) seen.push_back(x);
        CHECK_EQ(seen.size(), 12);
        for (std::size_t i = 0; i < seen.size(); i++)
            CHECK_EQ(seen[i], static_cast<int>((i / 4) * 16 + (i % 4) * 2));
        v(0, 1) = -7; // writable
        CHECK_EQ(memory[2], -7);
    }
    Py_XDECREF(e);
}

CXX_TEST(contiguous_span) {
    PyObject *a = eval("array.array('d', [0.5, 1.5, 2.5])");
    CHECK(a != nullptr);
    {
        auto v = pyxbuf::view<double>::get(a);
        CHECK(v.c_contiguous());
        auto s = v.span();
        CHECK_EQ(s.size(), 3);
        CHECK(s.data() == v.data());
        CHECK(s[1] == 1.5);
        double total = 0;
        for (double x : s) total += x;
        CHECK(total == 4.5);
        s[2] = 9.0;
        CHECK(v.try_span().has_value());
        CHECK((*v.try_span())[2] == 9.0);
    }
    Py_XDECREF(a);
}

CXX_TEST(format_checks) {
    CHECK(pyxbuf::detail::format_matches<float>("f"));
    CHECK(pyxbuf::detail::format_matches<float>("=f"));
    CHECK(pyxbuf::detail::format_matches<float>("@f"));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    CHECK(pyxbuf::detail::format_matches<float>("<f"));
    CHECK(!pyxbuf::detail::format_matches<float>(">f"));
#endif
    CHECK(!pyxbuf::detail::format_matches<float>("d"));
    CHECK(!pyxbuf::detail::format_matches<float>("i"));
    CHECK(!pyxbuf::detail::format_matches<float>("2f"));
    CHECK(!pyxbuf::detail::format_matches<float>("T{f}"));
    CHECK(pyxbuf::detail::format_matches<double>("d"));
    CHECK(pyxbuf::detail::format_matches<std::int32_t>("i"));
    CHECK(pyxbuf::detail::format_matches<std::int32_t>("=l"));
    CHECK(!pyxbuf::detail::format_matches<std::int32_t>("I"));
    CHECK(pyxbuf::detail::format_matches<std::int64_t>("q"));
    CHECK(pyxbuf::detail::format_matches<std::int64_t>(sizeof(long) == 8 ? "l" : "q"));
    CHECK(pyxbuf::detail::format_matches<std::uint8_t>(nullptr));
    CHECK(pyxbuf::detail::format_matches<std::uint8_t>("B"));
    CHECK(pyxbuf::detail::format_matches<std::int8_t>("b"));
    CHECK(pyxbuf::detail::format_matches<std::uint16_t>("H"));
    CHECK(pyxbuf::detail::format_matches<std::uint64_t>("Q"));
    CHECK(pyxbuf::detail::format_matches<bool>("?"));
    CHECK(!pyxbuf::detail::format_matches<bool>("B"));
    CHECK(pyxbuf::detail::format_matches<std::complex<float>>("Zf"));
    CHECK(pyxbuf::detail::format_matches<std::complex<double>>("Zd"));
    CHECK(!pyxbuf::detail::format_matches<std::complex<double>>("d"));
    CHECK(!pyxbuf::detail::format_matches<double>("Zf"));
    CHECK(!pyxbuf::detail::format_matches<float>("not a format"));
}

CXX_TEST(float8_and_packed_float4_formats) {
    using e4 = pyxbuf::float8_e4m3fn;
    using e5 = pyxbuf::float8_e5m2;
    using f4 = pyxbuf::float4_e2m1fn_x2;
    CHECK(pyxbuf::detail::format_matches<e4>("[ml_dtypes$float8_e4m3fn]"));
    CHECK(pyxbuf::detail::format_matches<e5>("[ml_dtypes$float8_e5m2]"));
    CHECK(!pyxbuf::detail::format_matches<e4>("[ml_dtypes$float8_e5m2]"));
    CHECK(!pyxbuf::detail::format_matches<e4>("[ml_dtypes$float8_e4m3fnuz]"));
    CHECK(!pyxbuf::detail::format_matches<e4>("B"));
    CHECK(!pyxbuf::detail::format_matches<std::uint8_t>("[ml_dtypes$float8_e4m3fn]"));
    // Packed float4: its own type, and bytes to anyone through struct$B.
    CHECK(pyxbuf::detail::format_matches<f4>("[pyxbuf$float4_e2m1fn_x2;struct$B]"));
    CHECK(pyxbuf::detail::format_matches<std::uint8_t>("[pyxbuf$float4_e2m1fn_x2;struct$B]"));
    CHECK(!pyxbuf::detail::format_matches<f4>("B"));
    // Decoding, against the encodings' definitions (ml_dtypes agrees).
    CHECK(e4{0x7e}.to_float() == 448.0f && e4{0xfe}.to_float() == -448.0f);
    CHECK(e4{0x38}.to_float() == 1.0f && e4{0x01}.to_float() == 0.001953125f);
    CHECK(e4{0x7f}.to_float() != e4{0x7f}.to_float()); // NaN; no infinities
    CHECK(e5{0x7b}.to_float() == 57344.0f && e5{0x3c}.to_float() == 1.0f);
    CHECK(e5{0x7c}.to_float() == std::numeric_limits<float>::infinity());
    CHECK(e5{0x01}.to_float() == 1.52587890625e-05f);
    const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++) {
        CHECK(f4{static_cast<std::uint8_t>(c)}.first() == fp4[c]);
        CHECK(f4{static_cast<std::uint8_t>(c << 4)}.second() == fp4[c]);
    }
    // A view over an exporter of packed float4 bytes, read both halves.
    PyObject *e = exporter("[pyxbuf$float4_e2m1fn_x2;struct$B]", 2, 0);
    CHECK(e != nullptr);
    {
        auto w = pyxbuf::view<f4>::get(e);
        CHECK_EQ(w.itemsize(), 1);
        w(0) = f4{0x72}; // first 1.0, second 6.0
        w(1) = f4{0x9f}; // first -6.0, second -0.5
        auto r = pyxbuf::view<const f4>::get(e);
        CHECK(r(0).first() == 1.0f && r(0).second() == 6.0f);
        CHECK(r(1).first() == -6.0f && r(1).second() == -0.5f);
    }
    Py_DECREF(e);
}

CXX_TEST(bfloat16_custom_format) {
    using bf = pyxbuf::bfloat16;
    // Format matching: the custom type by any alternative, native order, one item.
    CHECK(pyxbuf::detail::format_matches<bf>("[ml_dtypes$bfloat16]"));
    CHECK(pyxbuf::detail::format_matches<bf>("=[ml_dtypes$bfloat16]"));
    CHECK(pyxbuf::detail::format_matches<bf>("[jax$bf16;ml_dtypes$bfloat16]"));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    CHECK(pyxbuf::detail::format_matches<bf>("<[ml_dtypes$bfloat16]"));
    CHECK(!pyxbuf::detail::format_matches<bf>(">[ml_dtypes$bfloat16]"));
#endif
    CHECK(!pyxbuf::detail::format_matches<bf>("[ml_dtypes$bfloat1]"));
    CHECK(!pyxbuf::detail::format_matches<bf>("[ml_dtypes$bfloat16x]"));
    CHECK(!pyxbuf::detail::format_matches<bf>("[ml_dtypes$float16]"));
    CHECK(!pyxbuf::detail::format_matches<bf>("2[ml_dtypes$bfloat16]"));
    CHECK(!pyxbuf::detail::format_matches<bf>("[ml_dtypes$bfloat16][ml_dtypes$bfloat16]"));
    CHECK(!pyxbuf::detail::format_matches<bf>("e"));
    CHECK(!pyxbuf::detail::format_matches<bf>("H"));
    CHECK(!pyxbuf::detail::format_matches<std::uint16_t>("[ml_dtypes$bfloat16]"));
    // Conversions: exact widening, round to nearest even, NaN kept.
    CHECK(bf{0x3fc0}.to_float() == 1.5f);
    CHECK(static_cast<float>(bf{0xc000}) == -2.0f);
    CHECK_EQ(bf::from_float(1.5f).bits, 0x3fc0);
    CHECK_EQ(bf::from_float(1.0f + 1.0f / 256).bits, 0x3f80);      // a tie: to even
    CHECK_EQ(bf::from_float(1.0f + 3.0f / 256).bits, 0x3f82);      // a tie: to even, up
    CHECK_EQ(bf::from_float(1.0f + 1.0f / 128 + 1.0f / 4096).bits, 0x3f81);
    const float nan = bf::from_float(__builtin_nanf("")).to_float();
    CHECK(nan != nan);
    // A view over an exporter of bfloat16 items, read and written.
    PyObject *e = exporter("[ml_dtypes$bfloat16]", 3, 0);
    CHECK(e != nullptr);
    const Py_ssize_t before = Py_REFCNT(e);
    {
        auto w = pyxbuf::view<bf>::get(e);
        CHECK_EQ(w.itemsize(), 2);
        CHECK_EQ(w.size(), 3);
        CHECK(std::strcmp(w.format(), "[ml_dtypes$bfloat16]") == 0);
        w(0) = bf::from_float(1.5f);
        w(1) = bf::from_float(-2.0f);
        w(2) = bf::from_float(4.25f);
    }
    {
        auto v = pyxbuf::view<const bf>::get(e);
        float total = 0;
        for (bf x : v) total += x.to_float();
        CHECK(total == 3.75f);
        std::string msg = THROWN(pyxbuf::view<const std::uint16_t>::get(e));
        CHECK_CONTAINS(msg, "'[ml_dtypes$bfloat16]'");
        CHECK_CONTAINS(msg, "expected 'H'");
    }
    PyObject *h = exporter("e", 2, 0); // IEEE half: two bytes, another type
    CHECK(h != nullptr);
    CHECK_CONTAINS(THROWN(pyxbuf::view<const bf>::get(h)), "expected '[ml_dtypes$bfloat16]' (2-byte items)");
    CHECK_EQ(Py_REFCNT(e), before);
    Py_XDECREF(h);
    Py_XDECREF(e);
}

CXX_TEST(argument_casters_request_and_classify) {
    // What pyxbuf_nanobind.hpp and pyxbuf_pybind11.hpp ask for and decide.
    CHECK_EQ(pyxbuf::view<const float>::argument_flags, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED);
    CHECK_EQ(pyxbuf::view<float>::argument_flags, PyBUF_RECORDS_RO | PYXBUF_BORROW_EXCLUSIVE);
    using st = pyxbuf::detail::argument_status;
    PyObject *e = exporter("f", 4, 0);
    CHECK(e != nullptr);
    const Py_ssize_t before = Py_REFCNT(e);
    {
        pyxbuf::view<float> out;
        CHECK(pyxbuf::detail::load_argument(e, out) == st::acquired);
        CHECK(out.valid() && !out.readonly());
        CHECK(out.grants().exclusive && !out.grants().tracked);
        // The same memory as a shared argument: refused, BufferError left set.
        pyxbuf::view<const float> x;
        CHECK(pyxbuf::detail::load_argument(e, x) == st::refused);
        CHECK(!x.valid());
        CHECK(PyErr_ExceptionMatches(PyExc_BufferError));
        CHECK_CONTAINS(pyxbuf::detail::take_python_error().second, "exclusive borrow is live");
    }
    CHECK_EQ(Py_REFCNT(e), before);
    {
        pyxbuf::view<const float> a, b;
        CHECK(pyxbuf::detail::load_argument(e, a) == st::acquired);
        CHECK(pyxbuf::detail::load_argument(e, b) == st::acquired); // shared twice
        CHECK(a.grants().shared && b.grants().shared);
        pyxbuf::view<const double> d;
        CHECK(pyxbuf::detail::load_argument(e, d) == st::refused); // format: ItemTypeError kept
        CHECK(PyErr_ExceptionMatches(PyExc_TypeError) && PyErr_ExceptionMatches(PyExc_BufferError));
        CHECK_CONTAINS(pyxbuf::detail::take_python_error().second, "expected 'd'");
    }
    // Not an array at all: TypeError, cleared, so another overload may try.
    PyObject *n = PyLong_FromLong(3);
    pyxbuf::view<const float> v;
    CHECK(pyxbuf::detail::load_argument(n, v) == st::not_an_array);
    CHECK(!PyErr_Occurred());
    CHECK(!v.valid());
    Py_XDECREF(n);
    // Read-only memory for a view<float>: refused.
    PyObject *r = exporter("f", 2, 1);
    pyxbuf::view<float> w;
    CHECK(pyxbuf::detail::load_argument(r, w) == st::refused);
    CHECK_CONTAINS(pyxbuf::detail::take_python_error().second, "read-only");
    CHECK_EQ(Py_REFCNT(e), before);
    Py_XDECREF(r);
    Py_XDECREF(e);
}

CXX_TEST(format_mismatch_throws_naming_both_and_releases) {
    PyObject *a = eval("bytearray(struct.pack('2d', 1.0, 2.0))");
    PyObject *d = a ? PyMemoryView_FromObject(a) : nullptr;
    PyObject *cast = d ? PyObject_CallMethod(d, "cast", "s", "d") : nullptr;
    CHECK(cast != nullptr);
    const Py_ssize_t before = Py_REFCNT(cast);
    std::string msg = THROWN(pyxbuf::view<float>::get(cast));
    CHECK_CONTAINS(msg, "'d'");
    CHECK_CONTAINS(msg, "'f'");
    // An item type that is not T (DESIGN: Errors): pyxbuf.ItemTypeError.
    CHECK_CONTAINS(msg, "ItemTypeError: pyxbuf::view: the buffer's format is 'd'");
    CHECK_EQ(Py_REFCNT(cast), before);
    // Released: the bytearray can be resized again (no export left).
    Py_XDECREF(cast);
    PyObject *r = d ? PyObject_CallMethod(d, "release", nullptr) : nullptr;
    Py_XDECREF(r);
    PyObject *ext = a ? PyObject_CallMethod(a, "extend", "y", "xyz") : nullptr;
    CHECK(ext != nullptr);
    Py_XDECREF(ext);
    PyErr_Clear();
    // try_get: nullopt, the Python exception left set.
    auto t = pyxbuf::view<float>::try_get(a);
    CHECK(!t);
    CHECK(PyErr_ExceptionMatches(PyExc_TypeError) && PyErr_ExceptionMatches(PyExc_BufferError));
    CHECK(PyErr_ExceptionMatches(pyxbuf_item_type_error()));
    PyErr_Clear();
    // Bytes (no format asked: 'B') read as int16: the same class.
    PyObject *bytes = eval("b'abcd'");
    auto h = pyxbuf::view<const std::int16_t>::try_get(bytes, PyBUF_SIMPLE);
    CHECK(!h);
    CHECK(PyErr_ExceptionMatches(pyxbuf_item_type_error()));
    PyErr_Clear();
    Py_XDECREF(bytes);
    Py_XDECREF(d);
    Py_XDECREF(a);
}

CXX_TEST(writable_on_read_only_throws) {
    PyObject *b = eval("struct.pack('3f', 1, 2, 3)");
    CHECK(b != nullptr);
    const Py_ssize_t before = Py_REFCNT(b);
    std::string msg = THROWN(pyxbuf::view<std::uint8_t>::get(b));
    CHECK_CONTAINS(msg, "BufferError");
    CHECK_EQ(Py_REFCNT(b), before);
    {
        auto v = pyxbuf::view<const std::uint8_t>::get(b);
        CHECK(v.readonly());
        CHECK_EQ(v.size(), 12);
        CHECK_EQ(Py_REFCNT(b), before + 1);
    }
    CHECK_EQ(Py_REFCNT(b), before);
    PyObject *ro = exporter("f", 4, 1);
    CHECK(ro != nullptr);
    msg = THROWN(pyxbuf::view<float>::get(ro));
    CHECK_CONTAINS(msg, "BufferError");
    CHECK(pyxbuf::view<const float>::get(ro).readonly());
    // Not a buffer at all: TypeError, message kept.
    PyObject *none = eval("object()");
    msg = THROWN(pyxbuf::view<const float>::get(none));
    CHECK_CONTAINS(msg, "TypeError");
    Py_XDECREF(none);
    Py_XDECREF(ro);
    Py_XDECREF(b);
}

CXX_TEST(release_exactly_once_through_moves) {
    PyObject *a = eval("bytearray(16)");
    CHECK(a != nullptr);
    const Py_ssize_t before = Py_REFCNT(a);
    {
        auto v = pyxbuf::view<std::uint8_t>::get(a);
        CHECK_EQ(Py_REFCNT(a), before + 1);
        pyxbuf::view<std::uint8_t> w(std::move(v)); // move construction
        CHECK(!v.valid());
        CHECK(w.valid());
        CHECK_EQ(Py_REFCNT(a), before + 1);
        pyxbuf::view<std::uint8_t> x;
        CHECK(!x);
        x = std::move(w); // move assignment into an empty view
        CHECK(!w.valid());
        CHECK_EQ(Py_REFCNT(a), before + 1);
        auto y = pyxbuf::view<std::uint8_t>::get(a);
        CHECK_EQ(Py_REFCNT(a), before + 2);
        x = std::move(y); // move assignment releases what x held
        CHECK_EQ(Py_REFCNT(a), before + 1);
        x.at({3}) = 42;
        CHECK_EQ(PyByteArray_AsString(a)[3], 42);
        x.reset();
        CHECK_EQ(Py_REFCNT(a), before);
        x.reset(); // no-op
        CHECK_EQ(Py_REFCNT(a), before);
    } // every destructor here: moved-from or reset, no-ops
    CHECK_EQ(Py_REFCNT(a), before);
    // Borrow counts of the exporter: one view, then none.
    PyObject *e = exporter("f", 8, 0);
    {
        auto v = pyxbuf::view<float>::get(e, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE);
        CHECK(v.grants().exclusive);
        pyxbuf::view<float> w = std::move(v);
        CHECK(w.grants().exclusive);
        CHECK(!v.valid());
    }
    // Released exactly once: exclusive is grantable again.
    CHECK(pyxbuf::view<float>::get(e, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE).grants().exclusive);
    Py_XDECREF(e);
    Py_XDECREF(a);
}

CXX_TEST(exclusive_twice_second_throws) {
    PyObject *e = exporter("f", 8, 0);
    CHECK(e != nullptr);
    const Py_ssize_t before = Py_REFCNT(e);
    {
        auto v = pyxbuf::view<float>::get(e, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE);
        auto g = v.grants();
        CHECK(g.exclusive);
        CHECK(!g.shared);
        CHECK(!g.tracked);
        std::string msg = THROWN(pyxbuf::view<float>::get(e, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE));
        CHECK_CONTAINS(msg, "BufferError");
        CHECK_EQ(Py_REFCNT(e), before + 1);
        auto t = pyxbuf::view<const float>::try_get(e, PyBUF_RECORDS_RO | PYXBUF_BORROW_SHARED);
        CHECK(!t);
        PyErr_Clear();
    }
    CHECK_EQ(Py_REFCNT(e), before);
    // A classic producer: pyxbuf's registry grants a tracked exclusive borrow.
    PyObject *a = eval("bytearray(8)");
    {
        auto v = pyxbuf::view<std::uint8_t>::get(a, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE);
        CHECK(v.grants().exclusive);
        CHECK(v.grants().tracked);
        THROWN(pyxbuf::view<std::uint8_t>::get(a, PyBUF_RECORDS | PYXBUF_BORROW_EXCLUSIVE));
    }
    Py_XDECREF(a);
    Py_XDECREF(e);
}

CXX_TEST(device_memory_refuses_element_access) {
    pyxbuf_error err;
    CHECK(pyxbuf_emulated_register(&err) == 0);
    const pyxbuf_device dev1 = {PYXBUF_DL_EXT_DEV, 1};
    Py_ssize_t shape[1] = {4};
    PyObject *d = pyxbuf_exporter_new("d", 1, shape, 0, &dev1);
    CHECK(d != nullptr);
    {
        // Without PYXBUF_DEVICE device memory is refused.
        CHECK_CONTAINS(THROWN(pyxbuf::view<double>::get(d)), "BufferError");
        auto v = pyxbuf::view<double>::get(d, PyBUF_RECORDS | PYXBUF_DEVICE);
        CHECK(!v.device().host);
        CHECK(!v.is_host());
        CHECK_EQ(v.device().type, PYXBUF_DL_EXT_DEV);
        CHECK_EQ(v.device().id, 1);
        CHECK(v.device().identifier != nullptr);
        CHECK_EQ(v.size(), 4);
        CHECK(v.data() != nullptr);
        CHECK(!v.try_span()); // contiguous, but not host memory
        CHECK_CONTAINS(THROWN(v(0)), "device memory");
        CHECK_CONTAINS(THROWN(v.at({0})), "device memory");
        CHECK_CONTAINS(THROWN(v.span()), "device memory");
        CHECK_CONTAINS(THROWN(v.begin()), "device memory");
        // The C API still works on it: copy to the host.
        double host[4];
        CHECK(pyxbuf_copy_to_host(v.c_view(), host, sizeof host) == 0);
    }
    Py_XDECREF(d);
    // A host exporter asked with PYXBUF_DEVICE: host memory, accessible.
    PyObject *e = exporter("d", 4, 0);
    auto v = pyxbuf::view<double>::get(e, PyBUF_RECORDS | PYXBUF_DEVICE);
    CHECK(v.device().host);
    CHECK(v.device().identifier == nullptr);
    v(1) = 3.0;
    CHECK(v.at({1}) == 3.0);
    v.reset();
    Py_XDECREF(e);
}

CXX_TEST(zero_dimensional_and_flat_requests) {
    PyObject *a = eval("array.array('h', [1, 2, 3])");
    {
        // PyBUF_SIMPLE with uint8: no shape, no format: one flat run of bytes.
        auto v = pyxbuf::view<const std::uint8_t>::get(a, PyBUF_SIMPLE);
        CHECK_EQ(v.ndim(), 1);
        CHECK_EQ(v.shape(0), 6);
        CHECK_EQ(v.stride(0), 1);
        CHECK(std::strcmp(v.format(), "B") == 0);
    }
    PyObject *m = eval("memoryview(struct.pack('d', 2.5)).cast('d', ())");
    {
        auto v = pyxbuf::view<const double>::get(m);
        CHECK_EQ(v.ndim(), 0);
        CHECK_EQ(v.size(), 1);
        CHECK(v() == 2.5);
        CHECK(v.at({}) == 2.5);
        int n = 0;
        for (double x : v) {
            CHECK(x == 2.5);
            n++;
        }
        CHECK_EQ(n, 1);
    }
    Py_XDECREF(m);
    Py_XDECREF(a);
}

int main(int argc, char **argv) {
    Py_Initialize();
    int ran = 0;
    for (const auto &c : cases()) {
        if (argc > 1 && std::strcmp(argv[1], c.name) != 0) continue;
        const int before = failures;
        try {
            c.fn();
        } catch (const std::exception &e) {
            std::fprintf(stderr, "%s: unexpected exception: %s\n", c.name, e.what());
            failures++;
        }
        if (PyErr_Occurred()) {
            std::fprintf(stderr, "%s: Python exception left set\n", c.name);
            PyErr_Print();
            failures++;
        }
        std::fprintf(stderr, "%s cxx_view.%s\n", failures == before ? "ok  " : "FAIL", c.name);
        ran++;
    }
    if (ran == 0) {
        std::fprintf(stderr, "no test case named %s\n", argc > 1 ? argv[1] : "");
        failures++;
    }
    if (Py_FinalizeEx() < 0) failures++;
    return failures ? 1 : 0;
}
