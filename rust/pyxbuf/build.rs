//! PyO3's cfgs for the target interpreter: `Py_GIL_DISABLED`, by which the
//! spare view slots are per thread under free-threaded CPython and one
//! GIL-guarded stock otherwise (src/buffer/slot.rs), and, with the
//! `experimental-inspect` feature, the `Py_3_*` ones by which the stub type
//! of a buffer argument names the buffer ABC where the target Python has it
//! (`collections.abc.Buffer` from 3.12 on), as PyO3's own `PyBuffer` does.
//!
//! pyo3-build-config is 0.30 whichever PyO3 (0.28 to 0.30) the graph has:
//! it reads the interpreter's configuration from the direct dependency on
//! pyo3-ffi (Cargo.toml says why).
//!
//! `pyo3_before_0_29` and `pyo3_before_0_30` are declared here, not set:
//! `make test-pyo3-versions` sets them (RUSTFLAGS) for the tests against an
//! older PyO3, which expect what it does (0.28 names no argument in a note;
//! PyO3's own `PyBuffer` stub type before 0.30) or are ignored with the
//! reason (a comparison with an API PyO3 added in 0.30).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(pyo3_before_0_29, pyo3_before_0_30)");
    pyo3_build_config::print_expected_cfgs();
    pyo3_build_config::use_pyo3_cfgs();
}
