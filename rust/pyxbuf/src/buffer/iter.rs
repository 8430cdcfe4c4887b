//! `iter` / `iter_mut`: the items of host memory in logical C order (last
//! index fastest), for any strides, as `&T` / `&mut T` under the grants the
//! slices need. A view whose items follow each other iterates as a slice;
//! any other layout walks its (merged) dimensions.

use std::fmt;
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::{mem, slice};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use super::layout::non_overlapping;
use super::request::{BorrowMode, Exclusive};
use super::view::short_type_name;
use super::PyXBuffer;
use crate::element::{Element, ElementKind};

/// One dimension of a walk: its extent, its stride in bytes, and where the
/// walk is along it.
#[derive(Clone, Copy, Default)]
struct Dim {
    extent: usize,
    stride: isize,
    index: usize,
}

/// Outer dimensions kept without an allocation (after merging, what NumPy
/// views of up to five dimensions need).
const INLINE_DIMS: usize = 4;

/// The outer dimensions of a walk, outermost first.
#[derive(Clone)]
enum Dims {
    Inline(usize, [Dim; INLINE_DIMS]),
    Heap(Vec<Dim>),
}

impl Dims {
    fn push(&mut self, d: Dim) {
        match self {
            Dims::Inline(n, dims) if *n < INLINE_DIMS => {
                dims[*n] = d;
                *n += 1;
            }
            Dims::Inline(n, dims) => {
                let mut v = dims[..*n].to_vec();
                v.push(d);
                *self = Dims::Heap(v);
            }
            Dims::Heap(v) => v.push(d),
        }
    }

    fn as_slice(&self) -> &[Dim] {
        match self {
            Dims::Inline(n, dims) => &dims[..*n],
            Dims::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Dim] {
        match self {
            Dims::Inline(n, dims) => &mut dims[..*n],
            Dims::Heap(v) => v,
        }
    }

    fn pop(&mut self) -> Option<Dim> {
        match self {
            Dims::Inline(0, _) => None,
            Dims::Inline(n, dims) => {
                *n -= 1;
                Some(dims[*n])
            }
            Dims::Heap(v) => v.pop(),
        }
    }
}

/// A walk over the addresses of a strided layout's items in C order: runs
/// along the innermost dimension, an odometer over the others. Addresses
/// are computed with wrapping arithmetic and dereferenced only by the
/// iterators, for layouts `checked_walk` accepted.
#[derive(Clone)]
struct Walk {
    /// The next item's address, in the current run.
    next: *mut u8,
    /// Items left in the current run.
    run_left: usize,
    run_len: usize,
    /// The innermost dimension's stride.
    step: isize,
    /// Where the current run started.
    row: *mut u8,
    outer: Dims,
    /// Items left in all, the current run's included.
    left: usize,
}

impl Walk {
    /// The walk over `shape` / `strides` (bytes) from `base`. Dimensions of
    /// extent 1 are dropped and a dimension whose stride steps exactly over
    /// the next one is merged with it, so a C-contiguous view is one run.
    fn new(base: *mut u8, shape: &[usize], strides: &[isize]) -> Walk {
        // Bounded at acquisition (the product of the extents fits in isize).
        let count: usize = shape.iter().product();
        let mut dims = Dims::Inline(0, [Dim::default(); INLINE_DIMS]);
        if count > 0 {
            for (&extent, &stride) in shape.iter().zip(strides) {
                if extent == 1 {
                    continue;
                }
                match dims.as_mut_slice().last_mut() {
                    Some(o) if stride.checked_mul(extent as isize) == Some(o.stride) => {
                        o.extent *= extent;
                        o.stride = stride;
                    }
                    _ => dims.push(Dim {
                        extent,
                        stride,
                        index: 0,
                    }),
                }
            }
        }
        let run = dims.pop().unwrap_or(Dim {
            extent: 1,
            ..Dim::default()
        });
        Walk {
            next: base,
            run_left: if count > 0 { run.extent } else { 0 },
            run_len: run.extent,
            step: run.stride,
            row: base,
            outer: dims,
            left: count,
        }
    }

    /// The dimensions that remain after merging, outer ones first, as
    /// `(extent, stride)`.
    fn dims(&self) -> impl Iterator<Item = (usize, isize)> + '_ {
        let run = (self.run_len, self.step);
        let outer = self.outer.as_slice().iter().map(|d| (d.extent, d.stride));
        outer.chain(std::iter::once(run))
    }

    /// `Some((first, count))` when the items follow each other in memory
    /// as `T`s: one forward run with the item size as its step (or at most
    /// one item).
    fn contiguous<T>(&self) -> Option<(*mut T, usize)> {
        let one_run = self.outer.as_slice().is_empty();
        let first = if self.left == 0 {
            NonNull::<T>::dangling().as_ptr()
        } else {
            self.next.cast::<T>()
        };
        (one_run && (self.step == mem::size_of::<T>() as isize || self.left <= 1))
            .then_some((first, self.left))
    }

    #[inline]
    fn next(&mut self) -> Option<*mut u8> {
        if self.run_left == 0 {
            if self.left == 0 {
                return None;
            }
            self.next_run();
        }
        let p = self.next;
        self.next = p.wrapping_offset(self.step);
        self.run_left -= 1;
        self.left -= 1;
        Some(p)
    }

    /// Step the odometer to the next run (there are items left).
    fn next_run(&mut self) {
        let mut row = self.row;
        for d in self.outer.as_mut_slice().iter_mut().rev() {
            d.index += 1;
            if d.index < d.extent {
                row = row.wrapping_offset(d.stride);
                break;
            }
            // Back to this dimension's start; carry into the next one out.
            row = row.wrapping_offset(d.stride.wrapping_mul(1 - d.extent as isize));
            d.index = 0;
        }
        self.row = row;
        self.next = row;
        self.run_left = self.run_len;
    }

    /// Every remaining address in order, a run at a time (what `sum`,
    /// `for_each` and the other consuming adapters use).
    #[inline]
    fn fold<B>(mut self, init: B, mut f: impl FnMut(B, *mut u8) -> B) -> B {
        let mut acc = init;
        loop {
            let mut p = self.next;
            for _ in 0..self.run_left {
                acc = f(acc, p);
                p = p.wrapping_offset(self.step);
            }
            self.left -= self.run_left;
            if self.left == 0 {
                return acc;
            }
            self.next_run();
        }
    }
}

/// The items of either layout: those that follow each other through a
/// slice iterator (`walk` is `None`), any other layout through a boxed walk
/// (`slice` is empty). Not an enum: `walk` never changes while iterating,
/// so the compiler can split a `for` loop on it and run the contiguous case
/// as a plain slice loop, with the iterator in registers.
struct Items<S, P> {
    slice: S,
    walk: Option<Box<Walk>>,
    _p: PhantomData<P>,
}

impl<S: Default, P> Items<S, P> {
    fn new(slice: S) -> Self {
        Items {
            slice,
            walk: None,
            _p: PhantomData,
        }
    }

    fn walking(walk: Walk) -> Self {
        Items {
            slice: S::default(),
            walk: Some(Box::new(walk)),
            _p: PhantomData,
        }
    }
}

/// An iterator over the items of a [`PyXBuffer`] in C order (last index
/// fastest), whatever its strides: from [`PyXBuffer::iter`].
pub struct Iter<'a, T> {
    items: Items<slice::Iter<'a, T>, &'a T>,
}

/// An iterator over the items of a [`PyXBuffer`] as `&mut T`, in C order:
/// from [`PyXBuffer::iter_mut`].
pub struct IterMut<'a, T> {
    items: Items<slice::IterMut<'a, T>, &'a mut T>,
}

/// Iterator for both: `$deref` turns an address the walk reached into the
/// item (an `unsafe` block, whose promise is stated where each is made).
macro_rules! items_iterator {
    ($name:ident, $item:ty, |$p:ident| $deref:expr) => {
        impl<'a, T> Iterator for $name<'a, T> {
            type Item = $item;

            #[inline]
            fn next(&mut self) -> Option<$item> {
                match &mut self.items.walk {
                    None => self.items.slice.next(),
                    Some(w) => w.next().map(|$p| $deref),
                }
            }

            #[inline]
            fn size_hint(&self) -> (usize, Option<usize>) {
                let n = match &self.items.walk {
                    None => self.items.slice.len(),
                    Some(w) => w.left,
                };
                (n, Some(n))
            }

            #[inline]
            fn fold<B, F: FnMut(B, $item) -> B>(self, init: B, mut f: F) -> B {
                match self.items.walk {
                    None => self.items.slice.fold(init, f),
                    Some(w) => w.fold(init, |acc, $p| f(acc, $deref)),
                }
            }
        }

        impl<T> ExactSizeIterator for $name<'_, T> {}
        impl<T> FusedIterator for $name<'_, T> {}

        impl<T> fmt::Debug for $name<'_, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("remaining", &self.len())
                    .finish_non_exhaustive()
            }
        }
    };
}

items_iterator!(Iter, &'a T, |p| {
    // SAFETY: the walk reaches only items of the view, which checked_walk
    // found on the host, aligned, valid `T`s, under the borrow grant that
    // the iterator's borrow of the buffer keeps.
    unsafe { &*p.cast::<T>() }
});
items_iterator!(IterMut, &'a mut T, |p| {
    // SAFETY: as for Iter, and iter_mut accepted only layouts that reach
    // each item once (no overlaps) on writable memory under an exclusive
    // grant, borrowed mutably: the `&mut T`s are disjoint and unique.
    unsafe { &mut *p.cast::<T>() }
});

impl<T> Clone for Iter<'_, T> {
    fn clone(&self) -> Self {
        let items = Items {
            slice: self.items.slice.clone(),
            walk: self.items.walk.clone(),
            _p: PhantomData,
        };
        Iter { items }
    }
}

impl<'py, T: Element, M: BorrowMode> PyXBuffer<'py, T, M> {
    /// Every item as `&T`, in C order (the last index fastest), for any
    /// strides — negative, zero (a broadcast), with gaps — without a copy.
    /// A view whose items follow each other iterates as a slice.
    ///
    /// As for [`as_slice`](PyXBuffer::as_slice), the memory must be on the
    /// host and held under a borrow grant (see [`Grants`](crate::Grants)),
    /// and the items aligned for `T`; otherwise `BufferError` saying which
    /// (device memory; a producer that ignores borrow requests, where
    /// [`to_vec`](PyXBuffer::to_vec) copies instead).
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    ///
    /// #[pyfunction]
    /// fn total(x: PyXBuffer<'_, f32>) -> PyResult<f32> {
    ///     Ok(x.iter()?.sum())
    /// }
    ///
    /// Python::attach(|py| -> PyResult<()> {
    ///     let total = wrap_pyfunction!(total, py)?;
    ///     let every_other = py.eval(c"memoryview(__import__('array').array('f', [1, 2, 4]))[::2]", None, None)?;
    ///     assert_eq!(total.call1((every_other,))?.extract::<f32>()?, 5.0);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn iter(&self) -> PyResult<Iter<'_, T>> {
        let walk = self.checked_walk("iter()")?;
        let items = match walk.contiguous::<T>() {
            Some((first, count)) => {
                // SAFETY: `count` items of `T` that follow each other from
                // `first` (dangling for none), which checked_walk accepted as
                // for the walk's references; `&self` keeps view and grant.
                Items::new(unsafe { slice::from_raw_parts(first, count) }.iter())
            }
            None => Items::walking(walk),
        };
        Ok(Iter { items })
    }

    /// The walk over the items, or the refusal of `what` (`"iter()"`,
    /// `"iter_mut()"`) saying why: host memory under a grant, without
    /// suboffsets, items aligned for `T` and reachable within `isize` bytes,
    /// valid values (`bool`).
    fn checked_walk(&self, what: &str) -> PyResult<Walk> {
        let refuse = |why: String| self.refusal(what, &why);
        if !self.is_host() {
            return Err(refuse(format!(
                "it is in device memory ({:?}), which the host cannot read; copy it with \
                 copy_to_host() (or move it with to_device(Device::Cpu))",
                self.device()
            )));
        }
        if !self.grants().any() {
            return Err(refuse(
                "its producer granted no borrow (it ignores borrow requests), and references \
                 to its items need one; copy the items with to_vec()"
                    .to_owned(),
            ));
        }
        if self.suboffsets().is_some() {
            return Err(refuse(
                "it has suboffsets (PIL-style indirect memory), which iterators do not follow; \
                 copy the items with to_vec()"
                    .to_owned(),
            ));
        }
        let (shape, strides) = (self.shape(), self.strides());
        let walk = Walk::new(self.buf_ptr().cast(), shape, strides);
        let align = mem::align_of::<T>();
        let aligned = walk.left == 0
            || (!walk.next.is_null()
                && walk.next.cast::<T>().is_aligned()
                && walk.dims().all(|(_, s)| s.unsigned_abs() % align == 0));
        if !aligned {
            return Err(refuse(format!(
                "its items are not aligned for {} ({align} bytes): address {:p}, strides \
                 {strides:?}; copy the items with to_vec()",
                short_type_name::<T>(),
                self.buf_ptr(),
            )));
        }
        let span = walk.dims().try_fold(mem::size_of::<T>(), |span, (n, s)| {
            s.unsigned_abs()
                .checked_mul(n - 1)
                .and_then(|step| span.checked_add(step))
        });
        if walk.left > 0 && span.is_none_or(|b| b > isize::MAX as usize) {
            return Err(refuse(format!(
                "its strides {strides:?} for shape {shape:?} reach further than isize::MAX \
                 bytes; its producer is broken"
            )));
        }
        if matches!(T::KIND, ElementKind::Bool) {
            // SAFETY: one readable byte per item (a bool is one byte) of the
            // host memory the view keeps alive, read as u8 (any value).
            if !walk.clone().fold(true, |ok, p| ok && unsafe { *p } <= 1) {
                return Err(refuse(
                    "a bool item holds a byte other than 0 or 1; read the items as u8, or copy \
                     them with to_vec() (which makes any non-zero byte true)"
                        .to_owned(),
                ));
            }
        }
        Ok(walk)
    }

    /// The `BufferError` of an iterator this view cannot give.
    #[cold]
    fn refusal(&self, what: &str, why: &str) -> PyErr {
        PyBufferError::new_err(format!(
            "pyxbuf: {what} cannot iterate over the buffer of '{}': {why}",
            self.owner_name()
        ))
    }
}

impl<'py, T: Element> PyXBuffer<'py, T, Exclusive> {
    /// Every item as `&mut T`, in C order, for any strides under which no
    /// two indices reach the same bytes; no copy. It needs what
    /// [`as_mut_slice`](PyXBuffer::as_mut_slice) needs (writable host memory
    /// under the exclusive grant an `Exclusive` buffer holds) and what
    /// [`iter`](PyXBuffer::iter) needs (aligned items). A layout in which
    /// distinct indices overlap -- a zero stride, as a broadcast has -- is
    /// refused with `BufferError`: two `&mut` to one item would be
    /// undefined behaviour.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::{Exclusive, PyXBuffer1};
    ///
    /// #[pyfunction]
    /// fn scale(mut x: PyXBuffer1<'_, f32, Exclusive>, k: f32) -> PyResult<()> {
    ///     for v in x.iter_mut()? {
    ///         *v *= k;
    ///     }
    ///     Ok(())
    /// }
    ///
    /// Python::attach(|py| -> PyResult<()> {
    ///     let scale = wrap_pyfunction!(scale, py)?;
    ///     let array = py.eval(c"__import__('array').array('f', [1, 2, 3])", None, None)?;
    ///     let view = py.eval(c"memoryview", None, None)?.call1((&array,))?;
    ///     // Every other item, scaled in place.
    ///     let every_other = view.get_item(pyo3::types::PySlice::new(py, 0, 3, 2))?;
    ///     scale.call1((every_other, 2.0))?;
    ///     assert_eq!(array.call_method0("tolist")?.extract::<Vec<f32>>()?, [2.0, 2.0, 6.0]);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn iter_mut(&mut self) -> PyResult<IterMut<'_, T>> {
        if !self.grants().exclusive() || self.readonly() {
            let found = if self.readonly() {
                "it is read-only"
            } else {
                "it is held without an exclusive grant"
            };
            return Err(self.refusal(
                "iter_mut()",
                &format!("{found}, and writing needs writable memory under an exclusive grant; copy the items with to_vec()"),
            ));
        }
        let walk = self.checked_walk("iter_mut()")?;
        let axes = || walk.dims().map(|(n, s)| (n, s.unsigned_abs()));
        if walk.left > 1 && !non_overlapping(axes(), mem::size_of::<T>()) {
            return Err(self.refusal(
                "iter_mut()",
                &format!(
                    "distinct indices reach the same bytes (shape {:?}, strides {:?}: a zero \
                     stride, as a broadcast has, or strides shorter than what they step over), \
                     and two &mut to one item are undefined behaviour; write to a copy without \
                     overlaps (NumPy: a.copy()), or read it with iter()",
                    self.shape(),
                    self.strides(),
                ),
            ));
        }
        let items = match walk.contiguous::<T>() {
            Some((first, count)) => {
                // SAFETY: as in `iter`; the exclusive grant on writable
                // memory and `&mut self` make these the only references.
                Items::new(unsafe { slice::from_raw_parts_mut(first, count) }.iter_mut())
            }
            None => Items::walking(walk),
        };
        Ok(IterMut { items })
    }
}
