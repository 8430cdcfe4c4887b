//! Item types a [`PyXBuffer`](crate::PyXBuffer) can hold, and how their
//! format strings are recognised.

use std::ffi::{c_char, CStr};
use std::mem::{self, MaybeUninit};

use num_complex::Complex;
use pyxbuf_sys as sys;

/// What kind of item an [`Element`] is: which format strings describe it.
///
/// Sizes are never listed: a format matches only when the size pyxbuf's
/// parser gives its item (and the view's `itemsize`) equals
/// `size_of::<T>()`, so `'l'` is an `i64` where C's `long` is 8 bytes and an
/// `i32` under the standard-size prefix `"=l"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElementKind {
    /// Signed integers: `b h i l q n`.
    SignedInt,
    /// Unsigned integers: `B H I L Q N` (and `c` for one byte).
    UnsignedInt,
    /// IEEE floats: `e` (half), `f`, `d`.
    Float,
    /// `?`, one byte holding 0 or 1.
    Bool,
    /// Complex numbers of two floats: `Zf`, `Zd` (and `Ze`).
    Complex,
    /// A custom type of the custom-dtype proposal, `[id$payload]`: matches
    /// when one of the format's alternatives is exactly one of these
    /// `"id$payload"` strings (e.g. `"ml_dtypes$bfloat16"`).
    Custom(&'static [&'static str]),
}

/// An item type of a Python buffer: a plain value whose bytes pyxbuf can
/// hand out as `&[Self]`.
///
/// Implemented for every integer and float type, `bool`, [`half::f16`]
/// (`"e"`), [`half::bf16`] (`"[ml_dtypes$bfloat16]"`),
/// [`num_complex::Complex<f32>`](num_complex::Complex) /
/// `Complex<f64>` (`"Zf"` / `"Zd"`), and with the default features
/// `float8::F8E4M3` / `F8E5M2` (`"[ml_dtypes$float8_e4m3fn]"` /
/// `"[ml_dtypes$float8_e5m2]"`) and `float4::F4E2M1x2`
/// (`"[pyxbuf$float4_e2m1fn_x2;struct$B]"`, two float4 values per byte).
/// The crate re-exports them all: `pyxbuf::bf16`, `pyxbuf::f16`,
/// `pyxbuf::F8E4M3`, `pyxbuf::F8E5M2`, `pyxbuf::F4E2M1x2`.
///
/// # Custom types
///
/// A type described by a custom format (the custom-dtype proposal's
/// `[id$payload]`) is added with [`custom_element!`](crate::custom_element):
///
/// ```
/// /// ml_dtypes' float8_e4m3fn, one byte.
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// #[repr(transparent)]
/// pub struct Float8E4M3Fn(pub u8);
///
/// // SAFETY: one byte, every bit pattern is a valid value.
/// pyxbuf::custom_element!(unsafe Float8E4M3Fn = "ml_dtypes$float8_e4m3fn");
///
/// use pyxbuf::Element;
/// assert_eq!(Float8E4M3Fn::FORMAT, c"[ml_dtypes$float8_e4m3fn]");
/// ```
///
/// pyxbuf knows the sizes of ml_dtypes' types; for a type of your own, call
/// [`register_custom`](crate::register_custom) once so that C consumers and
/// `pyxbuf_format_itemsize` know its size too (a view's `itemsize` is what
/// `PyXBuffer` checks, so matching works without it).
///
/// # Safety
///
/// Implementors promise that `Self` is `Copy`, has no padding and no
/// interior pointers, that **every bit pattern** of `size_of::<Self>()`
/// bytes is a valid `Self` (`bool` is the one exception, handled inside this
/// crate), and that a buffer whose format matches [`Element::KIND`] with
/// items of `size_of::<Self>()` bytes really holds `Self` values.
pub unsafe trait Element: Copy + 'static {
    /// The canonical format string of one item: what this crate exports and
    /// names in error messages.
    const FORMAT: &'static CStr;
    /// Which formats describe this type.
    const KIND: ElementKind;

    #[doc(hidden)]
    /// Whether `bytes` (a whole number of items) are valid values. Only
    /// `bool` overrides it.
    #[inline]
    fn valid_bytes(_bytes: &[u8]) -> bool {
        true
    }

    #[doc(hidden)]
    /// Make `bytes` valid values in place (`bool`: nonzero becomes 1).
    #[inline]
    fn normalize_bytes(_bytes: &mut [MaybeUninit<u8>]) {}

    #[doc(hidden)]
    /// Read one item that another party may have written with any bits.
    ///
    /// # Safety
    /// `ptr` is valid for reads of `size_of::<Self>()` bytes and aligned.
    #[inline]
    unsafe fn read_item(ptr: *const Self) -> Self {
        // SAFETY: the caller's contract; every bit pattern is a valid Self
        // (the trait's contract), so whatever was written is a value.
        unsafe { ptr.read() }
    }
}

macro_rules! impl_element {
    ($($t:ty => $kind:ident, $fmt:literal;)*) => {$(
        // SAFETY: a primitive numeric type: no padding, every bit pattern
        // valid, and the format kind is the one the struct module uses for it.
        unsafe impl Element for $t {
            const FORMAT: &'static CStr = $fmt;
            const KIND: ElementKind = ElementKind::$kind;
        }
    )*};
}

impl_element! {
    i8 => SignedInt, c"b";
    i16 => SignedInt, c"h";
    i32 => SignedInt, c"i";
    i64 => SignedInt, c"q";
    isize => SignedInt, c"n";
    u8 => UnsignedInt, c"B";
    u16 => UnsignedInt, c"H";
    u32 => UnsignedInt, c"I";
    u64 => UnsignedInt, c"Q";
    usize => UnsignedInt, c"N";
    f32 => Float, c"f";
    f64 => Float, c"d";
    half::f16 => Float, c"e";
    Complex<f32> => Complex, c"Zf";
    Complex<f64> => Complex, c"Zd";
}

// SAFETY: bfloat16 is a `repr(transparent)` u16 (every bit pattern valid);
// `[ml_dtypes$bfloat16]` is the format DLPack's kDLBfloat and ml_dtypes'
// bfloat16 arrays get from pyxbuf.
unsafe impl Element for half::bf16 {
    const FORMAT: &'static CStr = c"[ml_dtypes$bfloat16]";
    const KIND: ElementKind = ElementKind::Custom(&["ml_dtypes$bfloat16"]);
}

// SAFETY: float8's F8E4M3 is a `repr(transparent)` u8 (every bit pattern a
// value) with OCP float8_e4m3fn's encoding (bias 7, no infinities, NaN
// S.1111.111): ml_dtypes' float8_e4m3fn and PyTorch's torch.float8_e4m3fn,
// which pyxbuf describes as `[ml_dtypes$float8_e4m3fn]` (DLPack's
// kDLFloat8_e4m3fn too).
#[cfg(feature = "float8")]
unsafe impl Element for float8::F8E4M3 {
    const FORMAT: &'static CStr = c"[ml_dtypes$float8_e4m3fn]";
    const KIND: ElementKind = ElementKind::Custom(&["ml_dtypes$float8_e4m3fn"]);
}

// SAFETY: a `repr(transparent)` u8 with OCP float8_e5m2's encoding (IEEE-like,
// bias 15): ml_dtypes' float8_e5m2 and torch.float8_e5m2.
#[cfg(feature = "float8")]
unsafe impl Element for float8::F8E5M2 {
    const FORMAT: &'static CStr = c"[ml_dtypes$float8_e5m2]";
    const KIND: ElementKind = ElementKind::Custom(&["ml_dtypes$float8_e5m2"]);
}

// SAFETY: float4's F4E2M1x2 is a `repr(transparent)` u8 (every bit pattern is
// two float4_e2m1fn codes) holding the first value in bits 3:0 and the second
// in bits 7:4, as PyTorch's float4_e2m1fn_x2 and NVIDIA's __nv_fp4x2_e2m1
// store them; pyxbuf reads such tensors (DLPack: kDLFloat4_e2m1fn, 4 bits,
// 2 lanes) as one-byte items of this format, whose struct$B alternative lets
// any consumer read the bytes.
#[cfg(feature = "float4")]
unsafe impl Element for float4::F4E2M1x2 {
    const FORMAT: &'static CStr = c"[pyxbuf$float4_e2m1fn_x2;struct$B]";
    const KIND: ElementKind = ElementKind::Custom(&["pyxbuf$float4_e2m1fn_x2"]);
}

// SAFETY: one byte; only 0 and 1 are valid, which `valid_bytes`,
// `normalize_bytes` and `read_item` enforce wherever bytes become bools.
unsafe impl Element for bool {
    const FORMAT: &'static CStr = c"?";
    const KIND: ElementKind = ElementKind::Bool;

    #[inline]
    fn valid_bytes(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }

    #[inline]
    fn normalize_bytes(bytes: &mut [MaybeUninit<u8>]) {
        for b in bytes {
            // SAFETY: the caller passes bytes that were written (copied in).
            let v = unsafe { b.assume_init() };
            b.write(u8::from(v != 0));
        }
    }

    #[inline]
    unsafe fn read_item(ptr: *const Self) -> Self {
        // SAFETY: the caller's contract covers one readable, aligned byte;
        // read it as u8 so a stray 2 is not an invalid bool.
        unsafe { ptr.cast::<u8>().read() != 0 }
    }
}

/// Implement [`Element`] for a type described by a custom format
/// `[id$payload]` (one `"id$payload"`, or several alternatives that all
/// describe it).
///
/// ```
/// #[derive(Clone, Copy)]
/// #[repr(transparent)]
/// struct Fixed16(u16);
/// // SAFETY: two bytes, every bit pattern valid, and "mylib$fixed16" items
/// // are exactly this.
/// pyxbuf::custom_element!(unsafe Fixed16 = "mylib$fixed16", "otherlib$q8_8");
/// # use pyxbuf::Element;
/// assert_eq!(Fixed16::FORMAT, c"[mylib$fixed16]");
/// ```
///
/// The `unsafe` keyword is part of the syntax: by writing it you make the
/// promises of [`Element`]'s safety section.
#[macro_export]
macro_rules! custom_element {
    (unsafe $t:ty = $id:literal $(, $alt:literal)* $(,)?) => {
        // SAFETY: promised by the macro's caller (see `Element`).
        unsafe impl $crate::Element for $t {
            const FORMAT: &'static ::std::ffi::CStr =
                match ::std::ffi::CStr::from_bytes_with_nul(
                    ::std::concat!("[", $id, "]\0").as_bytes(),
                ) {
                    ::std::result::Result::Ok(c) => c,
                    ::std::result::Result::Err(_) => {
                        ::std::panic!("a custom format id must not contain NUL")
                    }
                };
            const KIND: $crate::ElementKind = $crate::ElementKind::Custom(&[$id $(, $alt)*]);
        }
    };
}

/// The format string a view carries (`"B"` when the producer left it NULL).
///
/// # Safety
/// `format` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn format_of<'a>(format: *const c_char) -> &'a CStr {
    if format.is_null() {
        c"B"
    } else {
        // SAFETY: the caller's contract.
        unsafe { CStr::from_ptr(format) }
    }
}

fn native_order(order: u8) -> bool {
    match order {
        b'@' | b'=' | b'^' => true,
        b'<' => cfg!(target_endian = "little"),
        b'>' | b'!' => cfg!(target_endian = "big"),
        _ => false,
    }
}

/// The cheap test: the format is `T::FORMAT`, possibly behind a prefix that
/// means native byte order (`@`, `=`, `<` here). The reference for
/// [`matches_ptr`], which the tests compare it with.
#[cfg(test)]
fn fast_match<T: Element>(format: &[u8]) -> bool {
    let want = T::FORMAT.to_bytes();
    format == want
        || (format.len() == want.len() + 1
            && &format[1..] == want
            // The size was checked against the view's itemsize already.
            && native_order(format[0]))
}

fn codes_of(kind: ElementKind, size: usize) -> &'static [u8] {
    match kind {
        ElementKind::SignedInt => b"bhilqn",
        ElementKind::UnsignedInt if size == 1 => b"BHILQNc",
        ElementKind::UnsignedInt => b"BHILQN",
        ElementKind::Float | ElementKind::Complex => b"efd",
        ElementKind::Bool => b"?",
        ElementKind::Custom(_) => b"",
    }
}

fn scalar_matches<T: Element>(n: &sys::pyxbuf_format_node) -> bool {
    let complex = n.flags & sys::PYXBUF_FMTN_COMPLEX != 0;
    n.kind == sys::PYXBUF_FMT_SCALAR
        && n.repeat == 1
        && n.ndim == 0
        && n.flags & sys::PYXBUF_FMTN_POINTER == 0
        && complex == (T::KIND == ElementKind::Complex)
        && native_order(n.byte_order as u8)
        && n.itemsize == mem::size_of::<T>() as i64
        && u8::try_from(n.code).is_ok_and(|c| codes_of(T::KIND, mem::size_of::<T>()).contains(&c))
}

/// # Safety
/// `n` is a CUSTOM node of a live descriptor (its strings are valid).
unsafe fn custom_alternatives_match(n: &sys::pyxbuf_format_node, ids: &[&str]) -> bool {
    if n.alternatives.is_null() || n.alternatives_len <= 0 {
        return false;
    }
    // SAFETY: the descriptor points into the parsed string, which outlives it
    // (the caller's contract), for `alternatives_len` bytes.
    let alts = unsafe {
        std::slice::from_raw_parts(n.alternatives.cast::<u8>(), n.alternatives_len as usize)
    };
    alts.split(|&b| b == b';')
        .any(|alt| ids.iter().any(|id| id.as_bytes() == alt))
}

/// The slow test, through pyxbuf's parser: one item, in native byte order,
/// of T's kind and size; custom types by any of their alternatives.
fn parsed_match<T: Element>(format: &CStr) -> bool {
    let mut f = MaybeUninit::<sys::pyxbuf_format>::zeroed();
    // SAFETY: a NUL-terminated string and an output descriptor, both alive
    // for the call; on failure the descriptor is left empty (nothing to free).
    let rc =
        unsafe { sys::pyxbuf_format_parse(format.as_ptr(), f.as_mut_ptr(), std::ptr::null_mut()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: parse succeeded, so the descriptor is initialised.
    let f = unsafe { f.assume_init_mut() };
    // SAFETY: the node array holds `nnodes` nodes while `f` lives.
    let nodes =
        unsafe { std::slice::from_raw_parts(sys::pyxbuf_format_nodes(f), f.nnodes as usize) };
    let ok = match nodes {
        [root, ..] if root.nchildren == 1 && root.first_child > 0 => {
            let n = &nodes[root.first_child as usize];
            let plain = n.repeat == 1 && n.ndim == 0 && native_order(n.byte_order as u8);
            match (n.kind, T::KIND) {
                (sys::PYXBUF_FMT_SCALAR, _) => scalar_matches::<T>(n),
                (sys::PYXBUF_FMT_CUSTOM, ElementKind::Custom(ids)) => {
                    // SAFETY: `n` is a CUSTOM node of the live descriptor.
                    plain
                        && n.flags & sys::PYXBUF_FMTN_COMPLEX == 0
                        && unsafe { custom_alternatives_match(n, ids) }
                }
                // "[struct$f]" / "[buffer$<i]": the payload's one scalar.
                (sys::PYXBUF_FMT_CUSTOM, _) => {
                    plain
                        && n.nchildren == 1
                        && n.first_child > 0
                        && scalar_matches::<T>(&nodes[n.first_child as usize])
                }
                _ => false,
            }
        }
        _ => false,
    };
    // SAFETY: `f` came from a successful parse and is cleared once.
    unsafe { sys::pyxbuf_format_clear(f) };
    ok
}

/// Whether a view with this format and itemsize holds `T` items (over the
/// measured string: the reference the tests hold [`matches_ptr`] to).
#[cfg(test)]
pub(crate) fn matches<T: Element>(format: &CStr, itemsize: isize) -> bool {
    if itemsize != mem::size_of::<T>() as isize {
        return false;
    }
    fast_match::<T>(format.to_bytes()) || parsed_match::<T>(format)
}

/// Whether the NUL-terminated string at `p` starts with `want` (which ends in
/// its own NUL, so a match is the whole string). Stops at the first
/// difference, so it never reads past `p`'s NUL.
///
/// # Safety
/// `p` points to a NUL-terminated string.
#[inline(always)]
unsafe fn c_str_is(p: *const u8, want: &[u8]) -> bool {
    for (i, &w) in want.iter().enumerate() {
        // SAFETY: bytes 0..i of `p` equalled `want`'s, none of them its final
        // NUL, so byte i is within `p`'s string (at most its NUL).
        if unsafe { *p.add(i) } != w {
            return false;
        }
    }
    true
}

/// [`matches`] for a view's raw format pointer (NULL: `"B"`), without
/// measuring the string first: the common answer, `T::FORMAT` itself or
/// behind a native-order prefix, is decided by comparing a few bytes.
///
/// # Safety
/// `format` is NULL or a NUL-terminated string.
#[inline(always)]
pub(crate) unsafe fn matches_ptr<T: Element>(format: *const c_char, itemsize: isize) -> bool {
    if itemsize != mem::size_of::<T>() as isize {
        return false;
    }
    let want = T::FORMAT.to_bytes_with_nul();
    if format.is_null() {
        return want == b"B\0";
    }
    let p = format.cast::<u8>();
    // SAFETY: `p` is NUL-terminated (the caller's contract); the prefix test
    // reads byte 1 only when byte 0 was a prefix character, not the NUL.
    unsafe {
        c_str_is(p, want)
            || (native_order(*p) && c_str_is(p.add(1), want))
            || parsed_match::<T>(CStr::from_ptr(format))
    }
}

/// The element type this crate has for items of this format and size, as
/// a user writes it (`"pyxbuf::bf16"`, `"f64"`), for messages; `None` when
/// no built-in [`Element`] reads them.
///
/// # Safety
/// `format` is NULL or a NUL-terminated string.
pub(crate) unsafe fn rust_type_for(format: *const c_char, itemsize: isize) -> Option<&'static str> {
    macro_rules! first_of {
        ($($t:ty => $name:literal),* $(,)?) => {$(
            // SAFETY: the caller's contract on `format`.
            if unsafe { matches_ptr::<$t>(format, itemsize) } {
                return Some($name);
            }
        )*};
    }
    // Custom types first: their struct$ alternatives would match a primitive.
    first_of!(half::bf16 => "pyxbuf::bf16");
    #[cfg(feature = "float8")]
    first_of!(float8::F8E4M3 => "pyxbuf::F8E4M3", float8::F8E5M2 => "pyxbuf::F8E5M2");
    #[cfg(feature = "float4")]
    first_of!(float4::F4E2M1x2 => "pyxbuf::F4E2M1x2");
    first_of!(
        f32 => "f32", f64 => "f64", half::f16 => "pyxbuf::f16",
        Complex<f32> => "num_complex::Complex<f32>", Complex<f64> => "num_complex::Complex<f64>",
        i8 => "i8", i16 => "i16", i32 => "i32", i64 => "i64",
        u8 => "u8", u16 => "u16", u32 => "u32", u64 => "u64", bool => "bool",
    );
    None
}

/// Register `T`'s custom id with pyxbuf's process-wide custom-type registry,
/// so that format strings naming it have a size everywhere (C consumers,
/// `pyxbuf_format_itemsize`, exporters that compute sizes from formats).
/// Needed only for ids pyxbuf does not know (ml_dtypes' types are built in).
/// Does nothing for non-custom types.
///
/// ```
/// #[derive(Clone, Copy)]
/// #[repr(transparent)]
/// struct Fixed16(u16);
/// // SAFETY: two bytes, every bit pattern valid.
/// pyxbuf::custom_element!(unsafe Fixed16 = "mylib$fixed16");
/// pyxbuf::register_custom::<Fixed16>().unwrap();
/// ```
pub fn register_custom<T: Element>() -> Result<(), RegisterCustomError> {
    let ElementKind::Custom(ids) = T::KIND else {
        return Ok(());
    };
    for id in ids {
        let key = std::ffi::CString::new(*id).map_err(|_| RegisterCustomError {
            code: sys::PYXBUF_EINVAL,
            message: format!("custom id {id:?} contains NUL"),
        })?;
        let spec = sys::pyxbuf_dtype_spec {
            size: mem::size_of::<sys::pyxbuf_dtype_spec>() as u32,
            key: key.as_ptr(),
            itemsize: mem::size_of::<T>() as i64,
            alignment: mem::align_of::<T>() as i64,
            ..Default::default()
        };
        // SAFETY: a fully initialised spec whose key outlives the call (the
        // registry copies it).
        let rc = unsafe { sys::pyxbuf_dtype_register(&spec) };
        if rc != 0 {
            return Err(RegisterCustomError {
                code: rc,
                message: format!("pyxbuf_dtype_register({id:?}) failed with code {rc}"),
            });
        }
    }
    Ok(())
}

/// Why [`register_custom`] failed: a custom id that cannot be a C string
/// (`PYXBUF_EINVAL`), or the negative `PYXBUF_E*` code with which the C
/// registry (`pyxbuf_dtype_register`) refused the type. No Python exception
/// is involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterCustomError {
    /// The `PYXBUF_E*` code.
    pub code: i32,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for RegisterCustomError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pyxbuf error {})", self.message, self.code)
    }
}

impl std::error::Error for RegisterCustomError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both tests, which must agree: the measured string and the raw pointer.
    fn m<T: Element>(f: &CStr) -> bool {
        let size = mem::size_of::<T>() as isize;
        let by_str = matches::<T>(f, size);
        // SAFETY: a NUL-terminated string.
        let by_ptr = unsafe { matches_ptr::<T>(f.as_ptr(), size) };
        assert_eq!(by_str, by_ptr, "matches and matches_ptr disagree on {f:?}");
        by_str
    }

    #[test]
    fn null_format_is_unsigned_bytes_and_short_strings_stop_at_nul() {
        // SAFETY: NULL and NUL-terminated strings.
        unsafe {
            assert!(matches_ptr::<u8>(std::ptr::null(), 1));
            assert!(!matches_ptr::<i8>(std::ptr::null(), 1));
        }
        assert!(!m::<f32>(c"") && !m::<f32>(c"<") && !m::<f32>(c"<ff"));
        assert!(m::<f32>(c"f ")); // struct syntax: whitespace between items is ignored
        assert!(!m::<Complex<f32>>(c"Z") && !m::<Complex<f32>>(c"<Z"));
    }

    #[test]
    fn native_prefixes_and_sizes() {
        assert!(m::<f32>(c"f") && m::<f32>(c"<f") && m::<f32>(c"=f") && m::<f32>(c"@f"));
        assert!(!m::<f32>(c">f") && !m::<f32>(c"d") && !m::<f32>(c"2f") && !m::<f32>(c"(2)f"));
        assert!(m::<i64>(c"q") && m::<i64>(c"l") && m::<i64>(c"n") && !m::<i64>(c"=l"));
        assert!(m::<i32>(c"=l") && m::<i32>(c"i") && !m::<i32>(c"I"));
        assert!(m::<u8>(c"B") && m::<u8>(c"c") && !m::<i8>(c"c"));
        assert!(m::<bool>(c"?") && !m::<bool>(c"B"));
        assert!(m::<half::f16>(c"e") && !m::<half::f16>(c"H"));
    }

    #[test]
    fn complex_and_custom() {
        assert!(m::<Complex<f32>>(c"Zf") && m::<Complex<f64>>(c"<Zd"));
        assert!(!m::<Complex<f32>>(c"d") && !m::<f64>(c"Zf"));
        assert!(m::<half::bf16>(c"[ml_dtypes$bfloat16]"));
        assert!(m::<half::bf16>(c"<[ml_dtypes$bfloat16]"));
        assert!(m::<half::bf16>(c"[jax$bf16;ml_dtypes$bfloat16]"));
        assert!(!m::<half::bf16>(c">[ml_dtypes$bfloat16]"));
        assert!(!m::<half::bf16>(c"e") && !m::<half::f16>(c"[ml_dtypes$bfloat16]"));
        assert!(m::<float8::F8E4M3>(c"[ml_dtypes$float8_e4m3fn]"));
        assert!(m::<float8::F8E5M2>(c"[ml_dtypes$float8_e5m2]"));
        assert!(!m::<float8::F8E4M3>(c"[ml_dtypes$float8_e5m2]"));
        assert!(!m::<float8::F8E4M3>(c"[ml_dtypes$float8_e4m3fnuz]"));
        assert!(!m::<float8::F8E4M3>(c"B") && !m::<u8>(c"[ml_dtypes$float8_e4m3fn]"));
        // Packed float4: its own type, and bytes to anyone (struct$B).
        let packed = c"[pyxbuf$float4_e2m1fn_x2;struct$B]";
        assert!(m::<float4::F4E2M1x2>(packed) && m::<u8>(packed));
        assert!(!m::<float4::F4E2M1x2>(c"B") && !m::<i8>(packed));
        assert!(m::<f32>(c"[struct$f]") && m::<i16>(c"[buffer$<h]"));
    }

    #[test]
    fn itemsize_is_authoritative() {
        assert!(!matches::<f32>(c"f", 8));
        assert!(!matches::<u8>(c"B", 0));
    }
}
