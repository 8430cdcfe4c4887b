# pyxbuf's CMake package as the Python wheel ships it (pyxbuf.get_cmake_dir()):
# the static libpyxbuf built for the interpreter the wheel is for, every
# symbol hidden (PYXBUF_STATIC), so each extension module holds a private
# copy. The target pyxbuf::pyxbuf (also named pyxbuf::pyxbuf_static, as in an
# installed CMake build) carries the header directory and the definition.
# Python's own headers come from the consumer's find_package(Python ...),
# which scikit-build-core configures for the interpreter it builds for.
get_filename_component(_pyxbuf_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
include(CMakeFindDependencyMacro)
find_dependency(Threads)
if(NOT TARGET pyxbuf::pyxbuf_static)
  add_library(pyxbuf::pyxbuf_static STATIC IMPORTED)
  set_target_properties(pyxbuf::pyxbuf_static PROPERTIES
    IMPORTED_LOCATION "${_pyxbuf_root}/lib/libpyxbuf.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_pyxbuf_root}/include"
    INTERFACE_COMPILE_DEFINITIONS "PYXBUF_STATIC"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
endif()
if(NOT TARGET pyxbuf::pyxbuf)
  add_library(pyxbuf::pyxbuf INTERFACE IMPORTED)
  set_target_properties(pyxbuf::pyxbuf PROPERTIES INTERFACE_LINK_LIBRARIES pyxbuf::pyxbuf_static)
endif()
set(pyxbuf_INCLUDE_DIR "${_pyxbuf_root}/include")
set(pyxbuf_LIBRARY "${_pyxbuf_root}/lib/libpyxbuf.a")
unset(_pyxbuf_root)
set(pyxbuf_FOUND TRUE)
