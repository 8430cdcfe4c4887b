//! How `src/bindings.rs` and `src/emulated_bindings.rs` are generated from the
//! C headers. Shared by `examples/regenerate.rs` (writes the files, run by
//! `make bindings`) and `tests/bindings_up_to_date.rs` (regenerates and fails
//! on any difference). Both need libclang at run time; nothing else does.

use std::path::{Path, PathBuf};
use std::process::Command;

use bindgen::callbacks::{DeriveInfo, IntKind, ParseCallbacks};

/// The directory holding `c/` and `include/`: the crate itself (they are
/// links to the repository's, and real directories in the packaged crate).
pub fn sources_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The committed output files.
pub fn bindings_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bindings.rs")
}

pub fn emulated_bindings_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/emulated_bindings.rs")
}

/// The Python include directory of the interpreter PYO3_PYTHON names (else
/// `python3`): bindgen parses Python.h to understand the header, although
/// every CPython type is then taken from pyo3-ffi.
pub fn python_include() -> Result<String, String> {
    let python = std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let out = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ])
        .output()
        .map_err(|e| format!("cannot run {python} to find Python.h: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{python} failed to report its include directory: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether the interpreter's headers define the extended buffer protocol
/// (CPython with cpython/'s patch series): its `Py_buffer` is the grown one,
/// and pyxbuf.h describes `pyxbuf_view` through a union over it, the same
/// bytes as the committed bindings (generated from stock headers, with
/// pyo3-ffi's classic `Py_buffer`) but not the same text.
pub fn interpreter_has_native_protocol() -> Result<bool, String> {
    let header = Path::new(&python_include()?).join("pybuffer.h");
    let text = std::fs::read_to_string(&header)
        .map_err(|e| format!("cannot read {}: {e}", header.display()))?;
    Ok(text.contains("#define PyBUF_DEVICE"))
}

/// Integer macros get the Rust type of the C field or parameter they are
/// used with, so no cast is needed at the use site.
#[derive(Debug)]
struct MacroTypes;

impl ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        let kind = match name {
            "PYXBUF_VERSION_MAJOR"
            | "PYXBUF_VERSION_MINOR"
            | "PYXBUF_VERSION_PATCH"
            | "PYXBUF_ABI_VERSION"
            | "PYXBUF_SHARED_API_VERSION" => IntKind::U32,
            "PYXBUF_ERROR_MESSAGE_SIZE"
            | "PYXBUF_INLINE_NDIM"
            | "PYXBUF_MAX_NDIM"
            | "PYXBUF_FORMAT_MAX_DEPTH"
            | "PYXBUF_FORMAT_INLINE_NODES"
            | "PYXBUF_FORMAT_INLINE_DIMS" => IntKind::Custom {
                name: "usize",
                is_signed: false,
            },
            "PYXBUF_STREAM_DEFAULT" | "PYXBUF_STREAM_NONE" => IntKind::I64,
            "PYXBUF_EMULATED_POISON" => IntKind::U8,
            n if n.starts_with("PYXBUF_DL_FLAG_") => IntKind::U64,
            _ => IntKind::I32,
        };
        Some(kind)
    }

    /// bindgen cannot tell that pyo3-ffi's (blocklisted) `Py_buffer` is
    /// `Copy`, so the view that embeds it gets its derives here; `Debug` it
    /// cannot have (`Py_buffer` has none).
    fn add_derives(&self, info: &DeriveInfo<'_>) -> Vec<String> {
        if info.name == "pyxbuf_view" {
            vec!["Copy".into(), "Clone".into()]
        } else {
            vec![]
        }
    }
}

/// CPython's types come from pyo3-ffi, never regenerated.
const CPYTHON_TYPES: &str =
    "Py_buffer|PyObject|PyTypeObject|Py_ssize_t|_object|_typeobject|bufferinfo|ssize_t|__ssize_t";

fn builder(header: &Path) -> Result<bindgen::Builder, String> {
    let include = python_include()?;
    let target = bindgen::RustTarget::stable(85, 0).map_err(|e| e.to_string())?;
    Ok(bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{include}"))
        .clang_arg(format!("-I{}", sources_root().join("include").display()))
        .clang_arg("-DPYXBUF_STATIC")
        // The header's plain /* */ comments become rustdoc.
        .clang_arg("-fparse-all-comments")
        .rust_target(target)
        .blocklist_type(CPYTHON_TYPES)
        // a property of the C library built, not of these bindings (which
        // describe the backport layout on every interpreter): ask
        // pyxbuf_native_protocol() at run time
        .blocklist_item("PYXBUF_NATIVE_PROTOCOL")
        .derive_default(true)
        .derive_debug(true)
        .derive_copy(true)
        .generate_cstr(true)
        .merge_extern_blocks(true)
        .layout_tests(true)
        .parse_callbacks(Box::new(MacroTypes))
        .disable_header_comment()
        .formatter(bindgen::Formatter::Prettyplease))
}

fn render(builder: bindgen::Builder, what: &str) -> Result<String, String> {
    let bindings = builder
        .generate()
        .map_err(|e| format!("bindgen failed on {what}: {e}"))?;
    let body = bindings.to_string();
    Ok(format!(
        "// @generated by rust/pyxbuf-sys/examples/regenerate.rs from {what}: do not edit.\n\
         // Regenerate with `make bindings` (or `cargo run -p pyxbuf-sys --example regenerate`);\n\
         // `cargo test -p pyxbuf-sys` fails when this file and the header disagree.\n\
         {body}"
    ))
}

/// The bindings of include/pyxbuf.h.
pub fn generate_main() -> Result<String, String> {
    let header = sources_root().join("include/pyxbuf.h");
    let b = builder(&header)?
        .allowlist_function("pyxbuf_.*")
        .allowlist_type("pyxbuf_.*")
        .allowlist_var("PYXBUF_.*")
        .blocklist_function("pyxbuf_emulated_.*")
        .blocklist_var("PYXBUF_EMULATED_.*")
        // Only pyxbuf's own items: CPython's (Py_buffer, PyObject, ...) are
        // pyo3-ffi's, and blocklisting alone still lets bindgen walk into
        // PyTypeObject's members and emit them.
        .allowlist_recursively(false);
    render(b, "include/pyxbuf.h")
}

/// The bindings of c/device/emulated.h (the `emulated-device` feature): only its own items,
/// the rest comes from the main bindings.
pub fn generate_emulated() -> Result<String, String> {
    let header = sources_root().join("c/device/emulated.h");
    let b = builder(&header)?
        .allowlist_function("pyxbuf_emulated_.*")
        .allowlist_type("pyxbuf_emulated_.*")
        .allowlist_var("PYXBUF_EMULATED_.*")
        .allowlist_recursively(false);
    render(b, "c/device/emulated.h")
}

/// Whether libclang can be loaded here; the reason when not.
pub fn libclang_available() -> Result<(), String> {
    clang_sys::load().map_err(|e| format!("libclang is not available ({e})"))
}
