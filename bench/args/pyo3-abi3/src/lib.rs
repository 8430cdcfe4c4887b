//! The per-argument race's PyO3 routes (bench/args/pyo3/src/routes.rs, the
//! same source) built under CPython's stable ABI from 3.11: `make
//! bench-args` measures PyXBuffer against PyO3's PyBuffer here as in the
//! version-specific module (issue 50, item 5).

use pyo3::prelude::*;

#[path = "../../pyo3/src/routes.rs"]
mod routes;

#[pymodule]
mod _args_pyo3_abi3 {
    #[pymodule_export]
    use super::routes::{
        by_dlpark, by_numpy, by_pybuffer, by_pyxbuf, by_pyxbuf1, by_pyxbuf_bf16, by_pyxbuf_f8, noop,
    };
}
