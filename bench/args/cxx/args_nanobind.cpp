// args_nanobind.cpp -- the nanobind routes of the per-argument race
// (make bench-args): nanobind's own nb::ndarray against pyxbuf::view through
// pyxbuf_nanobind.hpp, each taking one 1-D float32 array and returning its
// length; noop takes any object and returns 0 (the call alone).
#include <pyxbuf_nanobind.hpp>

#include <nanobind/ndarray.h>

namespace nb = nanobind;

NB_MODULE(_args_nanobind, m) {
    m.def("noop", [](nb::handle) { return 0; });
    m.def("ndarray", [](nb::ndarray<const float, nb::ndim<1>, nb::device::cpu> x) {
        return static_cast<Py_ssize_t>(x.shape(0));
    });
    m.def("pyxbuf", [](const pyxbuf::view<const float> &x) {
        if (x.ndim() != 1) throw nb::type_error("expected a 1-D float32 array");
        return x.shape()[0];
    });
}
