//! No heap allocation per acquisition: a counting global allocator watches
//! repeated get/drop cycles (one test per binary: the counter is global).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::eval;
use pyo3::prelude::*;
use pyxbuf::{Device, Exclusive, PyXBuffer};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn acquisition_does_not_allocate() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(12, dtype=np.float32).reshape(3, 4)", &[]);
        let strided = eval(py, "a[:, ::2]", &[("a", &a)]);
        let ba = pyo3::types::PyByteArray::new(py, &[0u8; 32]).into_any();
        let e = pyxbuf::export::new_exporter::<half::bf16>(py, &[8], Device::Cpu).unwrap();
        let cycle = || {
            let b = PyXBuffer::<f32>::get(&a).unwrap();
            assert_eq!(b.as_slice().unwrap().len(), 12);
            drop(b);
            let s = PyXBuffer::<f32>::get(&strided).unwrap();
            assert!(s.as_slice().is_none() && s.shape() == [3, 2] && !s.is_c_contiguous());
            drop(s);
            let mut w = PyXBuffer::<u8, Exclusive>::get(&ba).unwrap();
            w.as_mut_slice().unwrap()[0] = 1;
            drop(w);
            let x = PyXBuffer::<half::bf16>::request().device().get(&e).unwrap();
            assert_eq!(x.as_slice().unwrap().len(), 8);
        };
        for _ in 0..100 {
            cycle(); // warm caches (NumPy's buffer info, the borrow registry)
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..1000 {
            cycle();
        }
        let after = ALLOCATIONS.load(Ordering::Relaxed);
        assert_eq!(
            after - before,
            0,
            "Rust heap allocations during 1000 acquisition cycles"
        );
        assert!(std::mem::size_of::<PyXBuffer<'_, f32>>() < 400);
    });
}
