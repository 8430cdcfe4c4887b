// args_pybind11.cpp -- the pybind11 routes of the per-argument race
// (make bench-args): pybind11's own py::array_t against pyxbuf::view through
// pyxbuf_pybind11.hpp, each taking one 1-D float32 array (pyxbuf's bfloat16
// and float8_e4m3fn routes: one such array) and returning its length; noop
// takes any object and returns 0 (the call alone).
#include <pyxbuf_pybind11.hpp>

#include <pybind11/numpy.h>

namespace py = pybind11;

PYBIND11_MODULE(_args_pybind11, m) {
    m.def("noop", [](py::handle) { return 0; });
    // py::array_t<float> as its users write it (forcecast: another dtype is
    // converted; a float32 array is taken as it is).
    m.def("array_t", [](py::array_t<float> x) {
        if (x.ndim() != 1) throw py::type_error("expected a 1-D float32 array");
        return x.shape(0);
    });
    m.def("pyxbuf", [](const pyxbuf::view<const float> &x) {
        if (x.ndim() != 1) throw py::type_error("expected a 1-D float32 array");
        return x.shape()[0];
    });
    // The machine-learning dtypes, through the same caster.
    m.def("pyxbuf_bf16", [](const pyxbuf::view<const pyxbuf::bfloat16> &x) {
        if (x.ndim() != 1) throw py::type_error("expected a 1-D bfloat16 array");
        return x.shape()[0];
    });
    m.def("pyxbuf_f8", [](const pyxbuf::view<const pyxbuf::float8_e4m3fn> &x) {
        if (x.ndim() != 1) throw py::type_error("expected a 1-D float8_e4m3fn array");
        return x.shape()[0];
    });
}
