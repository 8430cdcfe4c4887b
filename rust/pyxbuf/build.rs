//! With the `experimental-inspect` feature: PyO3's `Py_3_*` cfgs, by which
//! the stub type of a buffer argument names the buffer ABC where the
//! target Python has it (`collections.abc.Buffer` from 3.12 on), as PyO3's
//! own `PyBuffer` does. Nothing otherwise.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "experimental-inspect")]
    {
        pyo3_build_config::print_expected_cfgs();
        pyo3_build_config::use_pyo3_cfgs();
    }
}
