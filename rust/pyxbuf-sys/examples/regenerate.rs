//! Regenerate `src/bindings.rs` and `src/emulated_bindings.rs` from the C
//! headers (needs libclang): `make bindings`, or
//! `PYO3_PYTHON=.venv/bin/python cargo run -p pyxbuf-sys --example regenerate`.

#[path = "../codegen/mod.rs"]
mod codegen;

fn main() {
    if let Err(e) = codegen::libclang_available() {
        eprintln!("regenerate: {e}; install it (apt-get install libclang-dev)");
        std::process::exit(1);
    }
    // The committed bindings describe the backport layout, from stock headers.
    if codegen::interpreter_has_native_protocol().unwrap_or(false) {
        eprintln!(
            "regenerate: PYO3_PYTHON's headers have the extended buffer protocol (a grown \
             Py_buffer); generate the bindings against a stock CPython"
        );
        std::process::exit(1);
    }
    let outputs = [
        (codegen::bindings_path(), codegen::generate_main()),
        (
            codegen::emulated_bindings_path(),
            codegen::generate_emulated(),
        ),
    ];
    for (path, text) in outputs {
        match text {
            Ok(text) => {
                std::fs::write(&path, text)
                    .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
                println!("wrote {}", path.display());
            }
            Err(e) => {
                eprintln!("regenerate: {e}");
                std::process::exit(1);
            }
        }
    }
}
