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
//! What a dependent pays for it (bench/depcost/, `make bench-depcost`):
//! the files are compiled on up to `NUM_JOBS` threads (cargo's `-j`; one
//! file per task, largest first), not one after another; each function and
//! object in its own section (cc's default `-ffunction-sections
//! -fdata-sections`), so the final link's `--gc-sections` (rustc passes it)
//! drops what the module never reaches; `-DNDEBUG` without debug assertions
//! (a release build), as CPython builds extensions and CMake's release
//! types build this library, so the `assert`s in Python's inline headers are
//! not compiled in; debug info only when the profile asks for it (cc's `-g`
//! follows cargo's `DEBUG`). The library is rebuilt only when a file it is
//! built from changes: not for an edit under `c/tests` or `c/fuzz`.
//!
//! Under a pyo3 `abi3-py3*` feature (3.11 or newer) the library is compiled
//! with `Py_LIMITED_API` at that version, so an abi3 module that links it
//! loads into every CPython from there on; older minimums and the
//! free-threaded `abi3t` are refused before anything compiles.
//!
//! For dependents (`links = "pyxbuf"`): `DEP_PYXBUF_INCLUDE` (the directory
//! of `pyxbuf.h`) and `DEP_PYXBUF_LIB_DIR` (the directory of the static
//! `libpyxbuf.a` just built, which the `pyxbuf` Python wheel ships to C
//! extension authors).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The `Py_LIMITED_API` value to compile the C library with: `Some` for a
/// build that targets CPython's stable ABI (a pyo3 `abi3-py3*` feature),
/// the minimum version it names; `None` for a version-specific build. The
/// C library's limited mode needs 3.11 (the buffer protocol joined the
/// limited API there): an older minimum is refused here, before anything
/// compiles, as is the free-threaded stable ABI (`abi3t`), which pyxbuf has
/// not been built or tested for.
fn limited_api(config: &pyo3_build_config::InterpreterConfig) -> Option<String> {
    use pyo3_build_config::{PythonAbiKind, StableAbi};
    let abi = config.target_abi();
    match abi.kind() {
        PythonAbiKind::VersionSpecific(_) => None,
        PythonAbiKind::Stable(StableAbi::Abi3) => {
            let v = abi.version();
            if (v.major, v.minor) < (3, 11) {
                panic!(
                    "pyxbuf-sys: this build targets CPython's stable ABI from {}.{} (a pyo3 \
                     `abi3-py3{}` feature), but pyxbuf's limited-API build needs 3.11 or newer \
                     (the buffer protocol is in the limited API from 3.11); use pyo3's \
                     `abi3-py311` feature (or a newer one), or turn abi3 off",
                    v.major, v.minor, v.minor
                );
            }
            Some(format!("0x{:02X}{:02X}0000", v.major, v.minor))
        }
        PythonAbiKind::Stable(other) => panic!(
            "pyxbuf-sys: this build targets CPython's {other} stable ABI, which pyxbuf has not \
             been built or tested for; build a version-specific free-threaded wheel (no \
             `abi3t` feature), as pyxbuf's own free-threaded wheel is built"
        ),
    }
}

fn python_include(config: &pyo3_build_config::InterpreterConfig) -> String {
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

/// The paths whose changes rebuild the library: every folder of `c_dir`
/// but `tests` and `fuzz`, and every file directly in it.
fn watched(c_dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(c_dir)
        .unwrap_or_else(|e| panic!("pyxbuf-sys: cannot read {}: {e}", c_dir.display()));
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !(p.is_dir() && (name == "tests" || name == "fuzz"))
        })
        .collect();
    paths.sort();
    paths
}

/// Compiles `files` into objects on up to `NUM_JOBS` threads (cargo's `-j`,
/// at most the machine's parallelism), each thread taking the next file,
/// largest first, and returns the objects in `files`' order. cc's own
/// `parallel` feature would do it through cargo's jobserver, but it adds
/// `jobserver` and a second `libc` (a build dependency, compiled apart from
/// the target's) to every dependent's build graph; this needs nothing, at
/// the price of not asking the jobserver: the threads may briefly overlap
/// cargo's other jobs.
fn compile_parallel(build: &cc::Build, files: Vec<PathBuf>) -> Vec<PathBuf> {
    let jobs = env::var("NUM_JOBS")
        .ok()
        .and_then(|j| j.parse::<usize>().ok())
        .unwrap_or(1)
        .min(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, files.len().max(1));
    // Detect the compiler once, before the threads share the build's caches.
    let _ = build.get_compiler();
    let size = |p: &PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(size(&files[i])));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let failure = Mutex::new(None);
    let objects = Mutex::new(vec![PathBuf::new(); files.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let mut one = build.clone();
                    one.file(&files[i]);
                    match one.try_compile_intermediates() {
                        Ok(mut object) => {
                            objects.lock().expect("not poisoned")[i] = object.remove(0);
                        }
                        Err(e) => {
                            // The first error stops the other threads.
                            failed.store(true, Ordering::Relaxed);
                            failure.lock().expect("not poisoned").get_or_insert(e);
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("not poisoned") {
        panic!("pyxbuf-sys: compiling the C library failed: {e}");
    }
    objects.into_inner().expect("not poisoned")
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let c_dir = manifest.join("c");
    let include = manifest.join("include");
    // What the library is built from: each layer folder (cargo watches a
    // folder's files, recursively, so a new file there counts), the files
    // directly under c/, and include/; not c/tests or c/fuzz, whose edits
    // would otherwise recompile all of it.
    for path in watched(&c_dir) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-changed={}", include.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");

    let with_emulated = env::var_os("CARGO_FEATURE_EMULATED_DEVICE").is_some();
    let config = pyo3_build_config::get();
    let limited = limited_api(config);
    let py_include = python_include(config);
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
    // A release build (no debug assertions) compiles out the `assert`s of
    // Python's inline headers, as CPython's own extension flags and CMake's
    // Release / RelWithDebInfo do.
    if env::var_os("CARGO_CFG_DEBUG_ASSERTIONS").is_none() {
        build.define("NDEBUG", None);
    }
    // An abi3 build: the C library's limited mode (c/base/compat.h), the
    // same one CMake's PYXBUF_LIMITED_API builds.
    if let Some(version) = &limited {
        build.define("Py_LIMITED_API", version.as_str());
    }
    let objects = compile_parallel(&build, c_sources(&c_dir, with_emulated));
    build.objects(objects).compile("pyxbuf");

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
