//! PyO3's cfgs for the target interpreter: `Py_GIL_DISABLED`, by which the
//! spare view slots are per thread under free-threaded CPython and one
//! GIL-guarded stock otherwise (src/buffer/slot.rs), and, with the
//! `experimental-inspect` feature, the `Py_3_*` ones by which the stub type
//! of a buffer argument names the buffer ABC where the target Python has it
//! (`collections.abc.Buffer` from 3.12 on), as PyO3's own `PyBuffer` does.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    pyo3_build_config::print_expected_cfgs();
    pyo3_build_config::use_pyo3_cfgs();
}
