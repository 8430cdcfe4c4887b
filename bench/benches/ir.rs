//! `make bench-ir`: instruction counts (Callgrind, through gungraun) of each
//! pyxbuf operation beside its peer on the same object. Each benchmark runs
//! its operation `pyxbuf_bench::ir::ITERS` times in its own process;
//! `bench/ir_report.py` divides, forms the ratios of the targets (issue 12)
//! and writes `bench/results/ir-<date>.md`.
//!
//! The operations live in `bench/src/ir.rs` (the smoke test of `make test`
//! runs each once); this file only names them for gungraun.

use gungraun::{
    library_benchmark, library_benchmark_group, main, Callgrind, EntryPoint, LibraryBenchmarkConfig,
};
use pyxbuf_bench::ir::{prepare, Prepared};

#[library_benchmark]
#[bench::raw_getbuffer_numpy(args = ("raw_getbuffer/numpy_f32_2d"), setup = prepare)]
#[bench::raw_getbuffer_bytes(args = ("raw_getbuffer/bytes"), setup = prepare)]
#[bench::raw_getbuffer_memoryview(args = ("raw_getbuffer/memoryview"), setup = prepare)]
#[bench::pyxbuf_get_numpy(args = ("pyxbuf_get/numpy_f32_2d"), setup = prepare)]
#[bench::pyxbuf_get_bytes(args = ("pyxbuf_get/bytes"), setup = prepare)]
#[bench::pyxbuf_get_memoryview(args = ("pyxbuf_get/memoryview"), setup = prepare)]
#[bench::pyxbuf_get_shared_numpy(args = ("pyxbuf_get_shared/numpy_f32_2d"), setup = prepare)]
#[bench::pyo3_pybuffer_numpy(args = ("pyo3_pybuffer/numpy_f32_2d"), setup = prepare)]
#[bench::pyo3_pybuffer_bytes(args = ("pyo3_pybuffer/bytes"), setup = prepare)]
#[bench::pyo3_pybuffer_memoryview(args = ("pyo3_pybuffer/memoryview"), setup = prepare)]
#[bench::pyxbuffer_numpy(args = ("pyxbuffer/numpy_f32_2d"), setup = prepare)]
#[bench::pyxbuffer_bytes(args = ("pyxbuffer/bytes"), setup = prepare)]
#[bench::pyxbuffer_memoryview(args = ("pyxbuffer/memoryview"), setup = prepare)]
#[bench::pyxbuffer_slice_numpy(args = ("pyxbuffer_slice/numpy_f32_2d"), setup = prepare)]
fn acquire(p: Prepared) {
    p.run()
}

#[library_benchmark]
#[bench::pyxbuf_get_dlpack_only(args = ("pyxbuf_get/dlpack_only"), setup = prepare)]
#[bench::np_from_dlpack_dlpack_only(args = ("np_from_dlpack/dlpack_only"), setup = prepare)]
#[bench::pyxbuf_get_testext_dlpack_c(args = ("pyxbuf_get/testext_dlpack_c"), setup = prepare)]
#[bench::np_from_dlpack_testext_dlpack_c(args = ("np_from_dlpack/testext_dlpack_c"), setup = prepare)]
#[bench::pyxbuf_get_ml_dtypes_bf16(args = ("pyxbuf_get/ml_dtypes_bf16"), setup = prepare)]
#[bench::getattr_array_interface_ml_dtypes_bf16(args = ("getattr_array_interface/ml_dtypes_bf16"), setup = prepare)]
fn bridges(p: Prepared) {
    p.run()
}

// Single items: the budgets of target 6 are pyxbuf's own instructions, so
// Callgrind counts only inside `pyxbuf_format_*` (the harness's loop, its
// `black_box` and its assertions are not pyxbuf's). Their preparation runs
// nothing (bench/src/ir.rs), so only the measured calls are counted.
#[library_benchmark(
    config = LibraryBenchmarkConfig::default().tool(
        Callgrind::default().entry_point(EntryPoint::Custom("pyxbuf_format_*".to_owned()))
    )
)]
#[bench::format_parse_f(args = ("format_parse/f"), setup = prepare)]
#[bench::format_parse_le_d(args = ("format_parse/<d"), setup = prepare)]
#[bench::format_parse_zd(args = ("format_parse/Zd"), setup = prepare)]
#[bench::format_itemsize_f(args = ("format_itemsize/f"), setup = prepare)]
#[bench::format_itemsize_le_d(args = ("format_itemsize/<d"), setup = prepare)]
fn format_items(p: Prepared) {
    p.run()
}

#[library_benchmark]
#[bench::format_parse_struct3(args = ("format_parse/struct3"), setup = prepare)]
#[bench::numpy_pep3118_struct3(args = ("numpy_pep3118/struct3"), setup = prepare)]
fn formats(p: Prepared) {
    p.run()
}

library_benchmark_group!(
    name = ir,
    benchmarks = [acquire, bridges, format_items, formats]
);

main!(
    config = LibraryBenchmarkConfig::default().env_clear(false),
    library_benchmark_groups = ir
);
