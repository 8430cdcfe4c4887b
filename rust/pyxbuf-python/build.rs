//! Puts libpyxbuf for C extension authors into the Python package, the way
//! NumPy ships its headers: `python/pyxbuf/include/pyxbuf.h` (and beside it
//! the C++17 `pyxbuf.hpp` with its nanobind and pybind11 argument casters,
//! `pyxbuf_nanobind.hpp` and `pyxbuf_pybind11.hpp`),
//! `python/pyxbuf/lib/libpyxbuf.a` (the static library pyxbuf-sys just
//! compiled for this interpreter: position-independent, every symbol hidden)
//! and the version file of the CMake package in `python/pyxbuf/cmake/`.
//! maturin packs them into the wheel (`[tool.maturin] include`); they are
//! build outputs, ignored by git.
//!
//! Only a wheel's build writes them: the release profile without the
//! `emulated-device` feature. A development install (debug, emulated device)
//! leaves them alone, so a wheel never picks up a debug or test-only library
//! that another build left behind.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// Copies `from` into `to_dir`; cargo reruns this script when either side
/// changes or the copy goes missing.
fn copy(from: &Path, to_dir: &Path) {
    fs::create_dir_all(to_dir)
        .unwrap_or_else(|e| panic!("pyxbuf-python: cannot create {}: {e}", to_dir.display()));
    let to = to_dir.join(from.file_name().expect("a file"));
    fs::copy(from, &to).unwrap_or_else(|e| {
        panic!(
            "pyxbuf-python: cannot copy {} to {}: {e}",
            from.display(),
            to.display()
        )
    });
    // The copy keeps the source's time, so that it does not count as changed
    // since this run (cargo compares it with the run's start).
    let modified = fs::metadata(from).and_then(|m| m.modified());
    if let Ok(t) = modified {
        let _ = fs::File::options()
            .write(true)
            .open(&to)
            .and_then(|f| f.set_modified(t));
    }
    println!("cargo:rerun-if-changed={}", from.display());
    println!("cargo:rerun-if-changed={}", to.display());
}

fn dep_dir(var: &str) -> PathBuf {
    PathBuf::from(env::var(var).unwrap_or_else(|_| {
        panic!("pyxbuf-python: {var} is not set; pyxbuf-sys (links = \"pyxbuf\") sets it")
    }))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let wheel = env::var("PROFILE").as_deref() == Ok("release")
        && env::var_os("CARGO_FEATURE_EMULATED_DEVICE").is_none();
    if !wheel {
        return;
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    // The Python package beside this crate (the repository), or at the root
    // of an sdist, where maturin moves pyproject.toml's python-source.
    let package = [
        manifest.join("python/pyxbuf"),
        manifest.join("../../python/pyxbuf"),
    ]
    .into_iter()
    .find(|p| p.join("__init__.py").is_file())
    .unwrap_or_else(|| {
        panic!(
            "pyxbuf-python: no python/pyxbuf/__init__.py beside {} or at the root of its sdist",
            manifest.display()
        )
    });
    let include = dep_dir("DEP_PYXBUF_INCLUDE");
    let lib_dir = dep_dir("DEP_PYXBUF_LIB_DIR");
    copy(&include.join("pyxbuf.h"), &package.join("include"));
    for header in ["pyxbuf.hpp", "pyxbuf_nanobind.hpp", "pyxbuf_pybind11.hpp"] {
        copy(&include.join(header), &package.join("include"));
    }
    copy(&lib_dir.join("libpyxbuf.a"), &package.join("lib"));

    // CMake's SameMinorVersion rule, as the installed CMake package has it.
    let (major, minor) = (
        env::var("CARGO_PKG_VERSION_MAJOR").expect("set by cargo"),
        env::var("CARGO_PKG_VERSION_MINOR").expect("set by cargo"),
    );
    let version = env::var("CARGO_PKG_VERSION").expect("set by cargo");
    let file = package.join("cmake/pyxbufConfigVersion.cmake");
    let text = format!(
        "# Written by rust/pyxbuf-python/build.rs: pyxbuf {version}, compatible with\n\
         # requests for {major}.{minor}.x up to this version.\n\
         set(PACKAGE_VERSION \"{version}\")\n\
         set(PACKAGE_VERSION_COMPATIBLE FALSE)\n\
         if(PACKAGE_FIND_VERSION_MAJOR STREQUAL \"{major}\" AND\n\
         \x20  PACKAGE_FIND_VERSION_MINOR STREQUAL \"{minor}\" AND\n\
         \x20  NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)\n\
         \x20 set(PACKAGE_VERSION_COMPATIBLE TRUE)\n\
         \x20 if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)\n\
         \x20   set(PACKAGE_VERSION_EXACT TRUE)\n\
         \x20 endif()\n\
         endif()\n"
    );
    fs::write(&file, text)
        .unwrap_or_else(|e| panic!("pyxbuf-python: cannot write {}: {e}", file.display()));
}
