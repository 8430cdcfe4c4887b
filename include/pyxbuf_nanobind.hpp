// pyxbuf_nanobind.hpp -- pyxbuf::view<T> as a nanobind (3.1) function argument.
//
// Include it (after or instead of pyxbuf.hpp) in a nanobind extension, and a
// bound function may take a view where it would take nb::ndarray:
//
//   #include <pyxbuf_nanobind.hpp>
//   double sum(pyxbuf::view<const float> x) {           // shared borrow
//       double t = 0;
//       for (float v : x) t += v;                        // any strides
//       return t;
//   }
//   void scale(pyxbuf::view<float> x, float k) {          // exclusive borrow
//       for (float &v : x) v *= k;
//   }
//   NB_MODULE(ext, m) { m.def("sum", &sum); m.def("scale", &scale); }
//
// Any object pyxbuf_get reads is accepted: NumPy, bytes, memoryview,
// array.array, PyTorch CPU tensors (DLPack), ml_dtypes bfloat16 arrays
// (view<const pyxbuf::bfloat16>) ... The header ships in the pyxbuf wheel
// beside pyxbuf.h and pyxbuf.hpp (pyxbuf.get_include(); CMake's pyxbuf::pyxbuf
// target carries the directory); link libpyxbuf as for C (the pyxbuf::pyxbuf
// target). pybind11 users include pyxbuf_pybind11.hpp instead; the two
// behave alike.
//
// What an argument asks for (view<T>::argument_flags; the Rust PyXBuffer's
// defaults): strides and a format, host memory, and
//   - view<const T>: read-only, a shared borrow (PYXBUF_BORROW_SHARED):
//     nobody writes the memory while the call runs;
//   - view<T>: writable memory (read-only memory is refused) and an exclusive
//     borrow (PYXBUF_BORROW_EXCLUSIVE): only this view reads or writes it.
// So f(view<float> out, view<const float> x) called with one array twice is
// refused: the shared borrow of `x` conflicts with the exclusive one of `out`
// (for NumPy and other producers that know nothing of borrows, pyxbuf's
// cooperative registry decides; grants().tracked says so). The items must be
// T as pyxbuf.hpp defines it (format and itemsize); any strides are accepted.
// Device memory is refused: take an nb::object and call
// view<T>::get(obj, flags | PYXBUF_DEVICE) for it.
//
// Refusals. nanobind asks a caster whether it accepts an argument, tries the
// next overload when it does not, and raises a generic TypeError ("incompatible
// function arguments") when none does; pyxbuf's reason would be lost. So:
//   - an object pyxbuf cannot read at all (pyxbuf_get's TypeError) is simply
//     not accepted: the next overload may take it (an int, a str, a list);
//   - an array pyxbuf reads but refuses (another item type:
//     pyxbuf.ItemTypeError, a TypeError and a BufferError; read-only memory
//     for a view<T>, a borrow conflict, device memory: pyxbuf's BufferError;
//     each naming what was asked and what was found) is not accepted in
//     nanobind's first, strict pass over an overloaded function (another
//     overload may fit exactly), and in the pass that allows conversions -- the only pass of a
//     function with one overload -- it is accepted and its exception raised
//     when the call would start: the caller gets pyxbuf's exception itself.
//     Overloads after it are not tried then; put overloads that should take a
//     refused array (nb::object, a copying overload) before the view one.
//   - with nb::arg().noconvert() there is no such pass: refusals give
//     nanobind's TypeError.
//
// Lifetime. The view is acquired while nanobind converts the arguments and
// released with the GIL held, exactly once, on every path:
//   - taken by value (pyxbuf::view<const float> x): moved into the parameter,
//     released when the function returns or throws (before the exception
//     reaches Python), or when the function moves it elsewhere and that dies;
//   - taken by reference (const pyxbuf::view<const float> &x): held by the
//     caster and released after the call. Take views by reference in
//     functions bound with nb::call_guard<nb::gil_scoped_release>(): a
//     by-value parameter would be destroyed inside the guard, without the
//     GIL, which pyxbuf_release needs.
// When another argument fails to convert, views already acquired for the
// call are released before the next overload is tried or the error is raised.
// Do not keep a view past the call unless the GIL is held wherever it is
// released (pyxbuf.hpp's rules).
//
// Returning a view<T> returns the object it views (a new reference; the view
// itself is released). The type shows in signatures and stubs as
// collections.abc.Buffer.
#ifndef PYXBUF_NANOBIND_HPP
#define PYXBUF_NANOBIND_HPP

#include "pyxbuf.hpp"

#include <nanobind/nanobind.h>

#include <optional>
#include <type_traits>
#include <utility>

#if !PYXBUF_HPP_EXCEPTIONS
#error "pyxbuf_nanobind.hpp needs C++ exceptions (as nanobind does)"
#endif

namespace NB_NAMESPACE {
namespace detail {

template <class T> struct type_caster<pyxbuf::view<T>> {
    using Value = pyxbuf::view<T>;
    static constexpr auto Name = const_name("collections.abc.Buffer");
    template <class T_> using Cast = movable_cast_t<T_>;
    template <class T_> static constexpr bool can_cast() { return true; }

    Value value;
    // A refusal kept for the call (see "Refusals" above); raised when nanobind
    // takes the argument out of the caster.
    std::optional<python_error> refusal;

    bool from_python(handle src, uint8_t flags, cleanup_list *) noexcept {
        switch (pyxbuf::detail::load_argument<T>(src.ptr(), value)) {
        case pyxbuf::detail::argument_status::acquired: return true;
        case pyxbuf::detail::argument_status::not_an_array: return false;
        case pyxbuf::detail::argument_status::refused: break;
        }
        if (!(flags & static_cast<uint8_t>(cast_flags::convert))) {
            PyErr_Clear();
            return false;
        }
        refusal.emplace(); // takes the pending exception (and clears it)
        return true;
    }

    static handle from_cpp(const Value &v, rv_policy, cleanup_list *) noexcept {
        if (!v.valid()) return none().release();
        return handle(v.object()).inc_ref();
    }
    static handle from_cpp(const Value *v, rv_policy p, cleanup_list *c) noexcept {
        if (v == nullptr) return none().release();
        return from_cpp(*v, p, c);
    }

    explicit operator Value *() {
        raise_refusal();
        return &value;
    }
    explicit operator Value &() {
        raise_refusal();
        return value;
    }
    explicit operator Value &&() {
        raise_refusal();
        return std::move(value);
    }

private:
    void raise_refusal() {
        if (refusal) {
            python_error e = std::move(*refusal);
            refusal.reset();
            throw e; // nanobind's dispatcher restores it: the caller gets it
        }
    }
};

} // namespace detail
} // namespace NB_NAMESPACE

#endif // PYXBUF_NANOBIND_HPP
