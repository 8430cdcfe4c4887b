//! The ABI round trip: `cbindgen` writes a C header from the Rust side's
//! `#[repr(C)]` view of every public struct (the committed bindings, with
//! pyo3-ffi's `Py_buffer`), and a C file compiled against both that header
//! and include/pyxbuf.h asserts, with `_Static_assert`, the same `sizeof`,
//! `_Alignof`, and per field the same `offsetof` and `sizeof`. The C compiler
//! is the one that builds the library (`$CC`, else `cc`); a mismatch is a
//! compile error naming the struct and field.

#[allow(dead_code)]
#[path = "../codegen/mod.rs"]
mod codegen;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `(struct, [fields])` for every `#[repr(C)]` struct of the bindings.
fn rust_structs(bindings: &Path) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(bindings).unwrap();
    let file = syn::parse_file(&text).expect("the bindings parse");
    let mut out = Vec::new();
    for item in file.items {
        let syn::Item::Struct(s) = item else { continue };
        let repr_c = s.attrs.iter().any(|a| {
            a.path().is_ident("repr") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "C")
        });
        let syn::Fields::Named(fields) = &s.fields else {
            continue;
        };
        if !repr_c || fields.named.is_empty() {
            continue;
        }
        let names = fields
            .named
            .iter()
            .map(|f| f.ident.as_ref().unwrap().to_string())
            .collect();
        out.push((s.ident.to_string(), names));
    }
    out
}

/// On an interpreter with the extended protocol the C `Py_buffer` is the
/// grown one, while the bindings embed pyo3-ffi's classic `Py_buffer`: the
/// Rust side is mirrored with a struct of the classic layout, and
/// `pyxbuf_view.base` (the whole native `Py_buffer`, overlapping the
/// extended fields there) is compared by offset only.
const CLASSIC_PY_BUFFER: &str = "typedef struct { void *head[4]; int ints[2]; void *tail[5]; } \
     rs_classic_Py_buffer;\n_Static_assert(sizeof(rs_classic_Py_buffer) == offsetof(Py_buffer, \
     flags), \"the classic Py_buffer\");\n";

fn cbindgen_header(bindings: &Path, structs: &[(String, Vec<String>)], native: bool) -> String {
    let mut config = cbindgen::Config {
        language: cbindgen::Language::C,
        style: cbindgen::Style::Both,
        no_includes: true,
        ..Default::default()
    };
    config.export.prefix = Some("rs_".to_owned());
    config.export.item_types = vec![cbindgen::ItemType::Structs];
    config.export.include = structs.iter().map(|(name, _)| name.clone()).collect();
    // CPython's types are the real ones from Python.h on both sides.
    for ty in ["Py_buffer", "PyObject", "PyTypeObject", "Py_ssize_t"] {
        config.export.rename.insert(ty.to_owned(), ty.to_owned());
    }
    if native {
        config
            .export
            .rename
            .insert("Py_buffer".to_owned(), "rs_classic_Py_buffer".to_owned());
    }
    config.export.renaming_overrides_prefixing = true;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(bindings)
        .generate()
        .expect("cbindgen understands the bindings")
        .write(&mut out);
    let header = String::from_utf8(out).unwrap();
    if native {
        format!("{CLASSIC_PY_BUFFER}{header}")
    } else {
        header
    }
}

fn check_source(structs: &[(String, Vec<String>)], native: bool) -> String {
    let mut c = String::from(
        "#include \"pyxbuf.h\"\n#include <stddef.h>\n#include <stdbool.h>\n#include \
         <stdint.h>\n#include \"pyxbuf_rs.h\"\n\n#define SAME_STRUCT(T) _Static_assert(sizeof(T) \
         == sizeof(rs_##T) && _Alignof(T) == _Alignof(rs_##T), \"sizeof/alignof of \" #T \" \
         differ between C and Rust\");\n#define SAME_FIELD(T, f) _Static_assert(offsetof(T, f) \
         == offsetof(rs_##T, f) && sizeof(((T *)0)->f) == sizeof(((rs_##T *)0)->f), \"offset or \
         size of \" #T \".\" #f \" differs between C and Rust\");\n#define SAME_OFFSET(T, f) \
         _Static_assert(offsetof(T, f) == offsetof(rs_##T, f), \"offset of \" #T \".\" #f \" \
         differs between C and Rust\");\n\n",
    );
    for (name, fields) in structs {
        c.push_str(&format!("SAME_STRUCT({name})\n"));
        for f in fields {
            let check = if native && name == "pyxbuf_view" && f == "base" {
                "SAME_OFFSET"
            } else {
                "SAME_FIELD"
            };
            c.push_str(&format!("{check}({name}, {f})\n"));
        }
    }
    c
}

/// Generate the header and the check for `bindings` in `dir` and compile it:
/// `(structs, fields)` checked, or the compiler's complaint.
fn round_trip(bindings: &Path, dir: &Path) -> Result<(usize, usize), String> {
    let structs = rust_structs(bindings);
    let native = codegen::interpreter_has_native_protocol()?;
    std::fs::create_dir_all(dir).unwrap();
    let header = cbindgen_header(bindings, &structs, native);
    std::fs::write(dir.join("pyxbuf_rs.h"), header).unwrap();
    let source = dir.join("abi_round_trip.c");
    std::fs::write(&source, check_source(&structs, native)).unwrap();

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let python = codegen::python_include().expect("the Python include directory");
    let out = Command::new(&cc)
        .args(["-std=c11", "-fsyntax-only", "-Wall", "-DPYXBUF_STATIC"])
        .arg(format!(
            "-I{}",
            codegen::sources_root().join("include").display()
        ))
        .arg(format!("-I{python}"))
        .arg(format!("-I{}", dir.display()))
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    if !out.status.success() {
        return Err(format!(
            "{}\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let fields = structs.iter().map(|(_, f)| f.len()).sum();
    Ok((structs.len(), fields))
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[test]
fn c_and_rust_agree_on_every_struct() {
    let bindings = codegen::bindings_path();
    let names: Vec<String> = rust_structs(&bindings)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for must in [
        "pyxbuf_view",
        "pyxbuf_error",
        "pyxbuf_device_info",
        "pyxbuf_backend",
        "pyxbuf_export_desc",
        "pyxbuf_format",
        "pyxbuf_format_node",
        "pyxbuf_shared_api",
        "pyxbuf_borrow_key",
    ] {
        assert!(
            names.iter().any(|n| n == must),
            "{must} is missing from the bindings"
        );
    }
    match round_trip(&bindings, &tmp("abi_round_trip")) {
        Ok((structs, fields)) => println!("{structs} structs, {fields} fields agree"),
        Err(e) => panic!("the C and Rust views of the ABI differ: {e}"),
    }
}

/// The check is live: a Rust view with one field widened fails it.
#[test]
fn a_drifted_rust_view_is_caught() {
    let text = std::fs::read_to_string(codegen::bindings_path()).unwrap();
    let start = text.find("pub struct pyxbuf_device_info {").unwrap();
    let field = start + text[start..].find("pub device_id: i32,").unwrap();
    let drifted = format!(
        "{}pub device_id: i64,{}",
        &text[..field],
        &text[field + 19..]
    );
    let dir = tmp("abi_round_trip_drifted");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bindings.rs");
    std::fs::write(&path, drifted).unwrap();
    let err = round_trip(&path, &dir).expect_err("a widened field must be caught");
    assert!(err.contains("pyxbuf_device_info.device_id"), "{err}");
}
