// cxx_noexcept.cpp -- pyxbuf.hpp compiles with -fno-exceptions: try_get
// reports failures as the C API does (nullopt, the Python exception set).
#include "pyxbuf.hpp"

#include <cstdio>

int main() {
    Py_Initialize();
    int failures = 0;
    PyObject *b = PyBytes_FromStringAndSize("\x01\x02\x03\x04", 4);
    {
        auto v = pyxbuf::view<const std::uint8_t>::try_get(b);
        if (!v || v->size() != 4 || (*v)(2) != 3 || v->at({3}) != 4) failures++;
        unsigned total = 0;
        if (v)
            for (auto x : *v) total += x;
        if (total != 10) failures++;
    }
    auto w = pyxbuf::view<std::uint8_t>::try_get(b); // read-only memory
    if (w || !PyErr_ExceptionMatches(PyExc_BufferError)) failures++;
    PyErr_Clear();
    auto f = pyxbuf::view<const float>::try_get(b); // format 'B': another item type
    if (f || !PyErr_ExceptionMatches(PyExc_TypeError) ||
        !PyErr_ExceptionMatches(PyExc_BufferError)) // pyxbuf.ItemTypeError: both
        failures++;
    PyErr_Clear();
    Py_DECREF(b);
    if (Py_FinalizeEx() < 0) failures++;
    std::fprintf(stderr, "%s cxx_view.builds_without_exceptions\n", failures ? "FAIL" : "ok  ");
    return failures ? 1 : 0;
}
