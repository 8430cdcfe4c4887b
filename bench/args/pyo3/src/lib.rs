//! The PyO3 routes of the per-argument race (`make bench-args`,
//! `bench/args/race.py`): each function takes one 1-D float32 array and
//! returns its length; `noop` takes any object and returns 0, the cost of a
//! `#[pyfunction]` call with one argument and nothing else. The argument's
//! cost is a route's call minus `noop`'s, in the same module. The routes
//! are in routes.rs, which bench/args/pyo3-abi3 compiles too.

use pyo3::prelude::*;

mod routes;

#[pymodule]
mod _args_pyo3 {
    #[pymodule_export]
    use super::routes::{
        by_dlpark, by_numpy, by_pybuffer, by_pyxbuf, by_pyxbuf1, by_pyxbuf_bf16, by_pyxbuf_f8, noop,
    };
}
