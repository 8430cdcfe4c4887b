// The nanobind example: example::* (../cxx_functions.hpp) taking
// pyxbuf::view<T> arguments through pyxbuf_nanobind.hpp.
#include <pyxbuf_nanobind.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "../cxx_functions.hpp"

namespace nb = nanobind;

NB_MODULE(pyxbuf_cxx_nanobind, m) {
    m.attr("framework") = "nanobind";
    m.def("sum", &example::sum, nb::arg("x"));
    m.def("sum_bf16", &example::sum_bf16, nb::arg("x"));
    m.def("scale", &example::scale, nb::arg("x"), nb::arg("factor"));
    m.def("add_into", &example::add_into, nb::arg("out"), nb::arg("x"));
    m.def("same_memory", &example::same_memory, nb::arg("a"), nb::arg("b"));
    m.def("fail_after_write", &example::fail_after_write, nb::arg("x"));
    m.def("fail_by_reference", &example::fail_by_reference, nb::arg("x"));
    m.def("sum_by_reference", &example::sum_by_reference, nb::arg("x"),
          nb::call_guard<nb::gil_scoped_release>());
    m.def("sum_noconvert", &example::sum, nb::arg("x").noconvert());
    m.def("describe_shared", &example::describe_shared, nb::arg("x"));
    m.def("describe_exclusive", &example::describe_exclusive, nb::arg("x"));
    m.def("kind", &example::kind_float, nb::arg("x"));
    m.def("kind", &example::kind_double, nb::arg("x"));
    m.def("kind", [](nb::str) { return std::string("str"); }, nb::arg("x"));
    m.def("identity", &example::identity, nb::arg("x"));
}
