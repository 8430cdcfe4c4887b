//! `as_array` / `as_array_mut` (feature `ndarray`): ndarray views of host
//! memory held under a borrow grant, strided and with negative strides.

use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};

use super::layout::non_overlapping;
use super::request::{BorrowMode, Exclusive};
use super::PyXBuffer;
use crate::element::{Element, ElementKind};

/// Where an ndarray view starts and how it walks: the lowest-addressed item,
/// non-negative element strides, and the axes to flip back afterwards.
struct Parts<T> {
    ptr: *mut T,
    shape: Vec<usize>,
    strides: Vec<usize>,
    flipped: Vec<usize>,
}

impl<T: Element, M: BorrowMode> PyXBuffer<'_, T, M> {
    /// The view's layout in elements, when ndarray can describe it: host
    /// memory, no suboffsets, aligned items, byte strides that are whole
    /// multiples of the item size, and (ndarray's contract) a span from the
    /// lowest to the highest reachable item of at most `isize::MAX` bytes.
    /// The shape itself was bounded at acquisition (non-negative extents
    /// whose non-zero product fits in `isize`); the strides of an empty
    /// view are the producer's word only, so the span is checked here.
    fn array_parts(&self) -> Option<Parts<T>> {
        if !self.is_host() || self.suboffsets().is_some() {
            return None;
        }
        let size = std::mem::size_of::<T>() as isize;
        let shape = self.shape().to_vec();
        let empty = shape.contains(&0);
        let mut ptr = self.buf_ptr().cast::<u8>();
        let mut strides = Vec::with_capacity(shape.len());
        let mut flipped = Vec::new();
        let mut span = 0usize;
        for (axis, (&n, &s)) in shape.iter().zip(self.strides()).enumerate() {
            if size == 0 || s % size != 0 {
                return None;
            }
            // ndarray's bound: (n - 1) steps of |s| bytes on every axis.
            span = n
                .saturating_sub(1)
                .checked_mul(s.unsigned_abs())
                .and_then(|step| span.checked_add(step))
                .filter(|&b| b <= isize::MAX as usize)?;
            if s < 0 {
                if !empty && n > 0 {
                    // Start from this axis's lowest address.
                    ptr = ptr.wrapping_offset(s * (n as isize - 1));
                }
                flipped.push(axis);
            }
            strides.push((s / size).unsigned_abs());
        }
        let ptr = ptr.cast::<T>();
        if empty {
            return Some(Parts {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                shape,
                strides,
                flipped,
            });
        }
        (!ptr.is_null() && ptr.is_aligned()).then_some(Parts {
            ptr,
            shape,
            strides,
            flipped,
        })
    }

    /// `bool` items must be 0 or 1 before a `&bool` may point at them.
    fn items_valid(&self, parts: &Parts<T>) -> bool {
        if !matches!(T::KIND, ElementKind::Bool) {
            return true;
        }
        // SAFETY: the same items as bytes (bool is one byte), readable host
        // memory that the view keeps alive; u8 has no invalid values.
        let bytes = unsafe {
            ArrayViewD::from_shape_ptr(
                IxDyn(&parts.shape).strides(IxDyn(&parts.strides)),
                parts.ptr.cast::<u8>(),
            )
        };
        bytes.iter().all(|&b| b <= 1)
    }

    /// An ndarray view of the items — only under a shared or exclusive grant
    /// (as [`as_slice`](PyXBuffer::as_slice)), on host memory whose strides
    /// are whole items; negative strides are kept (the view runs backwards
    /// along those axes). `None` otherwise: use
    /// [`to_vec`](PyXBuffer::to_vec) and `Array::from_shape_vec`.
    ///
    /// ```
    /// use pyo3::prelude::*;
    /// use pyxbuf::PyXBuffer;
    /// Python::attach(|py| -> PyResult<()> {
    ///     let array = py.import("array")?.getattr("array")?.call1(("d", vec![1.0, 2.0, 3.0]))?;
    ///     let buf = PyXBuffer::<f64>::get(&array)?;
    ///     let view = buf.as_array().unwrap();
    ///     assert_eq!(view.sum(), 6.0);
    ///     Ok(())
    /// })
    /// .unwrap();
    /// ```
    pub fn as_array(&self) -> Option<ArrayViewD<'_, T>> {
        if !self.grants().any() {
            return None;
        }
        let parts = self.array_parts()?;
        if !self.items_valid(&parts) {
            return None;
        }
        // SAFETY: host memory the view keeps alive while `&self` is borrowed;
        // `ptr` is the lowest-addressed item and every item reached through
        // the non-negative element strides lies within the producer's
        // memory (the same items as the view's byte strides); aligned,
        // valid values (checked for bool); the grant means nobody writes it
        // meanwhile (see Grants).
        let mut view = unsafe {
            ArrayViewD::from_shape_ptr(
                IxDyn(&parts.shape).strides(IxDyn(&parts.strides)),
                parts.ptr,
            )
        };
        for &axis in &parts.flipped {
            view.invert_axis(Axis(axis));
        }
        Some(view)
    }
}

impl<T: Element> PyXBuffer<'_, T, Exclusive> {
    /// A mutable ndarray view — only under an exclusive grant, on writable
    /// host memory laid out as for [`as_array`](PyXBuffer::as_array), where
    /// no two indices reach the same item (a stride-0 broadcast, say, is
    /// refused: `None`).
    pub fn as_array_mut(&mut self) -> Option<ArrayViewMutD<'_, T>> {
        if !self.grants().exclusive() || self.readonly() {
            return None;
        }
        let parts = self.array_parts()?;
        if !self.items_valid(&parts)
            || !non_overlapping(
                parts
                    .shape
                    .iter()
                    .copied()
                    .zip(parts.strides.iter().copied()),
                1,
            )
        {
            return None;
        }
        // SAFETY: as in as_array, plus: the exclusive grant means no other
        // view reads or writes the memory, it is writable, `&mut self` makes
        // this the only view of it here, and no two indices alias.
        let mut view = unsafe {
            ArrayViewMutD::from_shape_ptr(
                IxDyn(&parts.shape).strides(IxDyn(&parts.strides)),
                parts.ptr,
            )
        };
        for &axis in &parts.flipped {
            view.invert_axis(Axis(axis));
        }
        Some(view)
    }
}
