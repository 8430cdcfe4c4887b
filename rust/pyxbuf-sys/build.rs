//! Compiles libpyxbuf (every `.c` under `c/` except the C tests, the fuzzers
//! and the test-only emulated device `c/device/emulated*.c`) into
//! a static library with the `cc` crate, so every crate that links
//! pyxbuf-sys carries its own private copy (PYXBUF_STATIC: nothing exported).
//! The `emulated-device` feature adds `c/device/emulated*.c`, the guarded emulated device.
//!
//! `c/` and `include/` in this crate are symbolic links to the repository's
//! `c/` and `include/`: one copy of the sources, which `cargo package`
//! dereferences into the packaged crate, so the crate builds anywhere.
//!
//! For dependents (`links = "pyxbuf"`): `DEP_PYXBUF_INCLUDE` (the directory
//! of `pyxbuf.h`) and `DEP_PYXBUF_LIB_DIR` (the directory of the static
//! `libpyxbuf.a` just built, which the `pyxbuf` Python wheel ships to C
//! extension authors).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python_include() -> String {
    let config = pyo3_build_config::get();
    if matches!(
        config.target_abi().kind(),
        pyo3_build_config::PythonAbiKind::Stable(_)
    ) {
        panic!(
            "pyxbuf-sys: this build targets CPython's stable ABI (abi3, from a pyo3 `abi3*` \
             feature), but libpyxbuf is compiled against the full C API of one interpreter \
             (Py_buffer internals, _PyType_Lookup, tp_version_tag), so an abi3 wheel that \
             links it would load into other Python versions and misbehave; turn the abi3 \
             feature off and build one wheel per Python version"
        );
    }
    let python = config
        .executable()
        .map(str::to_owned)
        .or_else(|| env::var("PYO3_PYTHON").ok())
        .unwrap_or_else(|| "python3".to_owned());
    let out = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("pyxbuf-sys: cannot run {python} to find Python.h ({e}); set PYO3_PYTHON")
        });
    assert!(
        out.status.success(),
        "pyxbuf-sys: {python} could not report its include directory: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("include directory is UTF-8")
        .trim()
        .to_owned()
}

/// The library's C sources: every `.c` file under `c/` (the layer folders
/// and `c/acquire.c`), sorted, except the C tests and fuzzers (`c/tests`,
/// `c/fuzz`) and, without the `emulated-device` feature, the emulated device
/// (`c/device/emulated*.c`). New files are picked up by themselves.
fn c_sources(c_dir: &Path, with_emulated: bool) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("pyxbuf-sys: cannot read {}: {e}", dir.display()));
        for path in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && name != "tests" && name != "fuzz" {
                walk(&path, out);
            } else if path.is_file() && name.ends_with(".c") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(c_dir, &mut files);
    let device = c_dir.join("device");
    let is_emulated = |p: &Path| {
        p.parent() == Some(device.as_path())
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("emulated"))
    };
    files.retain(|p| with_emulated || !is_emulated(p));
    files.sort();
    files
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let c_dir = manifest.join("c");
    let include = manifest.join("include");
    println!("cargo:rerun-if-changed={}", c_dir.display());
    println!("cargo:rerun-if-changed={}", include.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");

    let with_emulated = env::var_os("CARGO_FEATURE_EMULATED_DEVICE").is_some();
    let py_include = python_include();
    let mut build = cc::Build::new();
    build
        .std("c11")
        .define("PYXBUF_STATIC", None)
        .define("PYXBUF_BUILDING", None)
        .include(&include)
        .include(&c_dir)
        .include(&py_include)
        .flag_if_supported("-fvisibility=hidden")
        .flag_if_supported("-fno-semantic-interposition")
        // cc enables -Wall -Wextra; the CMake build is the one that runs -Werror.
        .warnings(true);
    for file in c_sources(&c_dir, with_emulated) {
        build.file(file);
    }
    build.compile("pyxbuf");

    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        // dlopen of libcuda.so.1; the borrow registry's and backends' locks.
        println!("cargo:rustc-link-lib=dl");
        println!("cargo:rustc-link-lib=pthread");
    }
    // For dependents that compile C against the header (DEP_PYXBUF_INCLUDE)
    // or ship the static library (DEP_PYXBUF_LIB_DIR).
    println!("cargo:include={}", include.display());
    let out_dir = env::var("OUT_DIR").expect("set by cargo");
    println!("cargo:lib_dir={out_dir}");
}
