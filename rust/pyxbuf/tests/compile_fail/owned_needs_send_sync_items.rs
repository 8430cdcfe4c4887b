// PyXBufferOwned<T> hands `&T` (and, exclusive, `&mut T`) to whichever
// thread binds it while the producer's thread holds the same memory, so it
// is Send and Sync only for items that are both (as HostArray is).
use std::cell::Cell;
use std::marker::PhantomData;

use pyxbuf::{Element, ElementKind, PyXBufferOwned};

#[derive(Clone, Copy)]
#[repr(transparent)]
struct SendNotSync(u32, PhantomData<Cell<u8>>);

// SAFETY: a u32 with a marker; every bit pattern is valid.
unsafe impl Element for SendNotSync {
    const FORMAT: &'static std::ffi::CStr = c"I";
    const KIND: ElementKind = ElementKind::UnsignedInt;
}

fn needs_send<X: Send>() {}
fn needs_sync<X: Sync>() {}

fn main() {
    needs_send::<PyXBufferOwned<SendNotSync>>();
    needs_sync::<PyXBufferOwned<SendNotSync>>();
}
