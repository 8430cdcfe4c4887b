//! What the type system refuses (trybuild): `as_mut_slice`, `iter_mut` and
//! `as_bytes_mut` without an exclusive borrow, buffers outliving their
//! `Python<'py>`, slices and byte views outliving their buffer, a byte view
//! as a type that does not allow every bit pattern (`bool`), buffers
//! crossing threads, `temporary()` outside `unsafe`,
//! a `HostArray` or a `PyXBufferOwned` shared across threads over items that
//! are not `Sync`, `export_pymethods!` on a class without the `ExportBuffer`
//! promise. The expected compiler messages are
//! in tests/compile_fail/*.stderr (regenerate with TRYBUILD=overwrite after a
//! toolchain change).

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
