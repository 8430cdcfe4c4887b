// consumer.cpp -- includes the installed pyxbuf.hpp and reads a bytes object.
#include <pyxbuf.hpp>

#include <cstdio>

int main() {
    Py_Initialize();
    PyObject *obj = PyBytes_FromString("installed");
    int rc = 1;
    try {
        auto v = pyxbuf::view<const std::uint8_t>::get(obj);
        std::printf("C++: read %zu bytes through %s\n", v.size(), v.path_name());
        rc = v.size() == 9 && v.span()[0] == 'i' ? 0 : 1;
    } catch (const pyxbuf::error &e) {
        std::fprintf(stderr, "%s\n", e.what());
    }
    Py_DECREF(obj);
    Py_FinalizeEx();
    return rc;
}
