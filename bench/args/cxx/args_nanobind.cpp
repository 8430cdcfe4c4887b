// args_nanobind.cpp -- the nanobind routes of the per-argument race
// (make bench-args): nanobind's own nb::ndarray against pyxbuf::view through
// pyxbuf_nanobind.hpp, each taking one 1-D float32 array (pyxbuf's bfloat16
// and float8_e4m3fn routes: one such array) and returning its length; noop
// takes any object and returns 0 (the call alone).
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
    // The machine-learning dtypes, through the same caster.
    m.def("pyxbuf_bf16", [](const pyxbuf::view<const pyxbuf::bfloat16> &x) {
        if (x.ndim() != 1) throw nb::type_error("expected a 1-D bfloat16 array");
        return x.shape()[0];
    });
    m.def("pyxbuf_f8", [](const pyxbuf::view<const pyxbuf::float8_e4m3fn> &x) {
        if (x.ndim() != 1) throw nb::type_error("expected a 1-D float8_e4m3fn array");
        return x.shape()[0];
    });
}
