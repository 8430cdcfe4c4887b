//! Eight OS threads, each attached to the interpreter, take shared and
//! exclusive `PyXBuffer`s of one exporter (issue 15). On a free-threaded
//! build with the GIL off they really run at once; with the GIL they still
//! interleave, because every holder works on its slice with the thread
//! detached (`py.detach`), which lets the others in.
//!
//! What must hold: an exclusive holder's `&mut [u64]` is never live while
//! another exclusive or shared holder is (the flags below would see it), and
//! no writer's increment is lost (the final values count every grant).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;

use pyo3::prelude::*;
use pyxbuf::export::HostArray;
use pyxbuf::{Exclusive, PyXBuffer};

const THREADS: usize = 8;
const ROUNDS: usize = 400;
const ITEMS: usize = 64;

host_exporter!(Shared, u64);

/// What the holders saw, shared by the threads.
#[derive(Default)]
struct Ledger {
    writing: AtomicBool,
    readers: AtomicUsize,
    writes: AtomicU64,
    reads: AtomicU64,
    refused: AtomicU64,
}

/// A few tries: readers come and go all the time, and a writer needs a
/// moment with none.
fn exclusive<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
) -> Option<PyXBuffer<'py, u64, Exclusive>> {
    for _ in 0..20 {
        if let Ok(w) = PyXBuffer::<u64, Exclusive>::get(obj) {
            return Some(w);
        }
        py.detach(thread::yield_now);
    }
    None
}

fn write_round(py: Python<'_>, obj: &Bound<'_, PyAny>, ledger: &Ledger) {
    let Some(mut w) = exclusive(py, obj) else {
        ledger.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    assert!(w.grants().exclusive() && w.grants().is_enforced());
    assert!(
        !ledger.writing.swap(true, Ordering::SeqCst),
        "two exclusive holders at once"
    );
    assert_eq!(
        ledger.readers.load(Ordering::SeqCst),
        0,
        "a reader beside the writer"
    );
    let items = w.as_mut_slice().unwrap();
    py.detach(|| {
        for x in items.iter_mut() {
            *x += 1;
        }
        thread::yield_now(); // let the others ask meanwhile
    });
    assert_eq!(
        ledger.readers.load(Ordering::SeqCst),
        0,
        "a reader beside the writer"
    );
    ledger.writing.store(false, Ordering::SeqCst);
    ledger.writes.fetch_add(1, Ordering::Relaxed);
}

fn read_round(py: Python<'_>, obj: &Bound<'_, PyAny>, ledger: &Ledger) {
    let Ok(r) = PyXBuffer::<u64>::get(obj) else {
        ledger.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    ledger.readers.fetch_add(1, Ordering::SeqCst);
    assert!(
        !ledger.writing.load(Ordering::SeqCst),
        "a writer beside a reader"
    );
    let items = r.as_slice().unwrap();
    // A writer adds one to every item: between writers they are all equal.
    let first = items[0];
    py.detach(|| assert!(items.iter().all(|&x| x == first), "a torn write was seen"));
    assert!(
        !ledger.writing.load(Ordering::SeqCst),
        "a writer beside a reader"
    );
    ledger.readers.fetch_sub(1, Ordering::SeqCst);
    ledger.reads.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn exclusive_holders_never_overlap_across_8_attached_threads() {
    let obj: Py<Shared> = Python::attach(|py| {
        let data = HostArray::from_vec(vec![0u64; ITEMS]);
        Py::new(py, Shared { data }).unwrap()
    });
    let ledger = Ledger::default();
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for i in 0..THREADS {
            let (obj, ledger, start) = (&obj, &ledger, &start);
            s.spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    Python::attach(|py| {
                        let any = obj.bind(py).as_any();
                        // Half the rounds write, on alternating threads.
                        if (i + round) % 2 == 0 {
                            write_round(py, any, ledger);
                        } else {
                            read_round(py, any, ledger);
                        }
                    });
                }
            });
        }
    });
    let writes = ledger.writes.load(Ordering::Relaxed);
    let reads = ledger.reads.load(Ordering::Relaxed);
    let refused = ledger.refused.load(Ordering::Relaxed);
    eprintln!("{writes} exclusive and {reads} shared grants, {refused} refused");
    assert_eq!(writes + reads + refused, (THREADS * ROUNDS) as u64);
    assert!(writes > 0 && reads > 0, "{writes} writes, {reads} reads");
    Python::attach(|py| {
        let shared = obj.bind(py).get();
        assert_eq!(shared.data.borrows().views(), 0);
        let values = shared.data.read(|x| x.to_vec()).unwrap();
        assert!(
            values.iter().all(|&x| x == writes),
            "every item must count all {writes} exclusive grants: {values:?}"
        );
    });
}
