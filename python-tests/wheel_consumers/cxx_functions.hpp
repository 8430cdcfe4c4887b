// cxx_functions.hpp -- the functions both C++ example extensions bind
// (nanobind/ and pybind11/, built against pyxbuf's wheel by make test-wheel;
// check_cxx_bindings.py tests them). Plain C++ over pyxbuf::view<T>: nothing
// here knows which framework called it.
#ifndef PYXBUF_CXX_FUNCTIONS_HPP
#define PYXBUF_CXX_FUNCTIONS_HPP

#include <pyxbuf.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace example {

// Any strides, any number of dimensions: the view's iterator walks C order.
inline double sum(pyxbuf::view<const float> x) {
    double total = 0;
    for (float v : x) total += v;
    return total;
}

// ml_dtypes bfloat16 items, widened exactly.
inline double sum_bf16(pyxbuf::view<const pyxbuf::bfloat16> x) {
    double total = 0;
    for (pyxbuf::bfloat16 v : x) total += v.to_float();
    return total;
}

// Writes through an exclusive borrow.
inline void scale(pyxbuf::view<float> x, float factor) {
    for (float &v : x) v *= factor;
}

// out += x, item by item in C order; both must have one shape.
inline void add_into(pyxbuf::view<float> out, pyxbuf::view<const float> x) {
    bool same = out.ndim() == x.ndim();
    for (int k = 0; same && k < x.ndim(); k++) same = out.shape(k) == x.shape(k);
    if (!same)
        throw std::invalid_argument("add_into: `out` and `x` must have the same shape; "
                                    "pass arrays of one shape");
    auto o = out.begin();
    for (float v : x) *o++ += v;
}

// Two shared borrows of one array may coexist: whether both see one address.
inline bool same_memory(pyxbuf::view<const float> a, pyxbuf::view<const float> b) {
    return a.data() == b.data();
}

// Throws after the view was acquired (and written through): the view must be
// released on the way out.
inline void fail_after_write(pyxbuf::view<float> x) {
    if (x.size() > 0) *x.begin() = -1.0f;
    throw std::runtime_error("fail_after_write: failed on purpose after acquiring the view");
}

// The same, the view held by the caster (taken by reference).
inline double fail_by_reference(const pyxbuf::view<const float> &x) {
    throw std::runtime_error("fail_by_reference: failed on purpose with a view of " +
                             std::to_string(x.size()) + " items");
}

// Called without the GIL (call_guard): element access needs none, and the
// view, taken by reference, is released after the guard has taken it back.
inline double sum_by_reference(const pyxbuf::view<const float> &x) {
    double total = 0;
    for (float v : x) total += v;
    return total;
}

// shape, byte strides, itemsize, format, path, (shared, exclusive, tracked).
using layout = std::tuple<std::vector<Py_ssize_t>, std::vector<Py_ssize_t>, Py_ssize_t,
                          std::string, std::string, std::tuple<bool, bool, bool>>;

template <class T> layout describe(const pyxbuf::view<T> &v) {
    std::vector<Py_ssize_t> shape(v.shape(), v.shape() + v.ndim());
    std::vector<Py_ssize_t> strides(v.strides(), v.strides() + v.ndim());
    auto g = v.grants();
    return layout(shape, strides, v.itemsize(), v.format(), v.path_name(),
                  std::make_tuple(g.shared, g.exclusive, g.tracked));
}

inline layout describe_shared(pyxbuf::view<const float> x) { return describe(x); }
inline layout describe_exclusive(pyxbuf::view<float> x) { return describe(x); }

// Overloads: which one took the argument.
inline std::string kind_float(pyxbuf::view<const float>) { return "float32"; }
inline std::string kind_double(pyxbuf::view<const double>) { return "float64"; }

// Returning a view returns the object it views.
inline pyxbuf::view<const float> identity(pyxbuf::view<const float> x) { return x; }

} // namespace example

#endif // PYXBUF_CXX_FUNCTIONS_HPP
