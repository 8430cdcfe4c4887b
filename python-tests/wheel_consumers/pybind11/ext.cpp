// The pybind11 example: example::* (../cxx_functions.hpp) taking
// pyxbuf::view<T> arguments through pyxbuf_pybind11.hpp.
#include <pyxbuf_pybind11.hpp>

#include <pybind11/stl.h>

#include "../cxx_functions.hpp"

namespace py = pybind11;

PYBIND11_MODULE(pyxbuf_cxx_pybind11, m) {
    m.attr("framework") = "pybind11";
    m.def("sum", &example::sum, py::arg("x"));
    m.def("sum_bf16", &example::sum_bf16, py::arg("x"));
    m.def("scale", &example::scale, py::arg("x"), py::arg("factor"));
    m.def("add_into", &example::add_into, py::arg("out"), py::arg("x"));
    m.def("same_memory", &example::same_memory, py::arg("a"), py::arg("b"));
    m.def("fail_after_write", &example::fail_after_write, py::arg("x"));
    m.def("fail_by_reference", &example::fail_by_reference, py::arg("x"));
    m.def("sum_by_reference", &example::sum_by_reference, py::arg("x"),
          py::call_guard<py::gil_scoped_release>());
    m.def("sum_noconvert", &example::sum, py::arg("x").noconvert());
    m.def("describe_shared", &example::describe_shared, py::arg("x"));
    m.def("describe_exclusive", &example::describe_exclusive, py::arg("x"));
    m.def("kind", &example::kind_float, py::arg("x"));
    m.def("kind", &example::kind_double, py::arg("x"));
    m.def("kind", [](py::str) { return std::string("str"); }, py::arg("x"));
    m.def("identity", &example::identity, py::arg("x"));
}
