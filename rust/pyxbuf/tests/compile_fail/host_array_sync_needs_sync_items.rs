// HostArray<T> shared between threads hands out &T on several threads at
// once, so it is Sync only for T: Sync (an Element that is Send but not Sync
// makes a HostArray that is not Sync).
use std::cell::Cell;
use std::marker::PhantomData;

use pyxbuf::export::HostArray;
use pyxbuf::{Element, ElementKind};

#[derive(Clone, Copy)]
#[repr(transparent)]
struct SendNotSync(u32, PhantomData<Cell<u8>>);

// SAFETY: a u32 with a marker; every bit pattern is valid.
unsafe impl Element for SendNotSync {
    const FORMAT: &'static std::ffi::CStr = c"I";
    const KIND: ElementKind = ElementKind::UnsignedInt;
}

fn needs_sync<X: Sync>() {}

fn main() {
    needs_sync::<HostArray<SendNotSync>>();
}
