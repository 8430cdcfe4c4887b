// pyxbuf_pybind11.hpp -- pyxbuf::view<T> as a pybind11 (3.1) function argument.
//
// Include it (after or instead of pyxbuf.hpp) in a pybind11 extension, and a
// bound function may take a view where it would take py::array_t:
//
//   #include <pyxbuf_pybind11.hpp>
//   double sum(pyxbuf::view<const float> x) {           // shared borrow
//       double t = 0;
//       for (float v : x) t += v;                        // any strides
//       return t;
//   }
//   void scale(pyxbuf::view<float> x, float k) {          // exclusive borrow
//       for (float &v : x) v *= k;
//   }
//   PYBIND11_MODULE(ext, m) { m.def("sum", &sum); m.def("scale", &scale); }
//
// It ships in the pyxbuf wheel beside pyxbuf.h, pyxbuf.hpp and
// pyxbuf_nanobind.hpp (pyxbuf.get_include(); CMake's pyxbuf::pyxbuf target
// carries the directory); link libpyxbuf as for C. The rules are those of
// pyxbuf_nanobind.hpp, which says them in full; in short:
//   - view<const T> asks for read-only host memory with a shared borrow,
//     view<T> for writable host memory with an exclusive borrow
//     (view<T>::argument_flags), so one array passed as both is refused;
//   - an object pyxbuf cannot read (pyxbuf_get's TypeError) is not accepted,
//     and the next overload may take it; an array pyxbuf reads but refuses
//     (format, read-only, borrow conflict, device memory) is not accepted in
//     pybind11's no-convert pass (the first pass over an overloaded function,
//     or an argument marked py::arg().noconvert()), and in a pass that allows
//     conversion -- the only pass of a function with one overload -- its
//     exception (pyxbuf.ItemTypeError -- a TypeError and a BufferError -- for
//     another item type, BufferError for memory it cannot hand out; each
//     naming what was asked and found) is raised to the caller at once
//     (py::error_already_set from load()), so later overloads are not tried:
//     order overloads accordingly;
//   - by value, the view is moved into the parameter and released when the
//     function returns or throws; by reference it is released after the call,
//     which is what functions with py::call_guard<py::gil_scoped_release>
//     need (pyxbuf_release needs the GIL); views acquired for arguments that
//     came before a failing one are released before anything else happens.
// Returning a view<T> returns the object it views (a new reference). The type
// shows in signatures as collections.abc.Buffer.
#ifndef PYXBUF_PYBIND11_HPP
#define PYXBUF_PYBIND11_HPP

#include "pyxbuf.hpp"

#include <pybind11/pybind11.h>

#include <utility>

#if !PYXBUF_HPP_EXCEPTIONS
#error "pyxbuf_pybind11.hpp needs C++ exceptions (as pybind11 does)"
#endif

namespace pybind11 {
namespace detail {

template <class T> struct type_caster<pyxbuf::view<T>> {
    PYBIND11_TYPE_CASTER(pyxbuf::view<T>, const_name("collections.abc.Buffer"));

    bool load(handle src, bool convert) {
        switch (pyxbuf::detail::load_argument<T>(src.ptr(), value)) {
        case pyxbuf::detail::argument_status::acquired: return true;
        case pyxbuf::detail::argument_status::not_an_array: return false;
        case pyxbuf::detail::argument_status::refused: break;
        }
        if (!convert) {
            PyErr_Clear();
            return false;
        }
        throw error_already_set(); // takes pyxbuf's exception; the caller gets it
    }

    static handle cast(const pyxbuf::view<T> &v, return_value_policy, handle) {
        if (!v.valid()) return none().release();
        return handle(v.object()).inc_ref();
    }
};

} // namespace detail
} // namespace pybind11

#endif // PYXBUF_PYBIND11_HPP
