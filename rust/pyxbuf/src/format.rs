//! [`Format`]: a format string parsed by pyxbuf's C parser (`struct`
//! module syntax, PEP 3118 and the custom-dtype proposal's `[id$payload]`),
//! to read what a buffer's items are and to compare formats by meaning.

use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::MaybeUninit;
use std::str::FromStr;

use pyxbuf_sys as sys;

use crate::element::{self, Element};

/// What one item of a format is. Sizes are not part of the kind: read
/// [`Field::itemsize`] (a `'l'` is 8 bytes natively on Linux, 4 under `'='`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FormatKind {
    /// `b h i l q n`.
    SignedInt,
    /// `B H I L Q N`.
    UnsignedInt,
    /// `e f d g`.
    Float,
    /// `Zf Zd Zg` (and `F D G`): two floats.
    Complex,
    /// `?`.
    Bool,
    /// `c`, one byte of text.
    Char,
    /// `s`, bytes (the count is the string's length).
    Bytes,
    /// `p`, a Pascal string (the count is its length, length byte included).
    PascalString,
    /// `w` (UCS-4) or `u` (UCS-2) text.
    Unicode,
    /// `P`, or an item behind the `&` prefix.
    Pointer,
    /// `O`, a Python object reference.
    Object,
    /// `x`, padding bytes.
    Padding,
    /// `T{...}`, or a format of several fields (the format's own kind when
    /// it is not one plain item).
    Struct,
    /// `[id$payload;...]`, a custom type of the custom-dtype proposal.
    Custom,
}

/// Byte order of a field, with the native one resolved for this target
/// (`@`, `=` and `^` are native; `<` little; `>` and `!` big).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

impl ByteOrder {
    /// This target's byte order.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };

    fn of_mode(mode: i32) -> ByteOrder {
        match u8::try_from(mode) {
            Ok(b'<') => ByteOrder::Little,
            Ok(b'>' | b'!') => ByteOrder::Big,
            _ => ByteOrder::NATIVE,
        }
    }
}

/// A custom type `[id$payload]`: the alternative pyxbuf chose (the first
/// it knows, else the first) and all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Custom {
    /// The chosen alternative's id (`"ml_dtypes"`).
    pub id: String,
    /// The chosen alternative's payload (`"bfloat16"`).
    pub payload: String,
    /// Every `"id$payload"` between the brackets, in order.
    pub alternatives: Vec<String>,
}

/// One field of a format: a scalar, a struct, a custom type or padding,
/// with its place in the enclosing item.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Field {
    /// What it is.
    pub kind: FormatKind,
    /// The struct code of a scalar (`'f'`; the component's code for a
    /// complex, the pointee's behind `&`); `None` for structs, custom types
    /// and padding.
    pub code: Option<char>,
    /// Its `:name:`, if it has one.
    pub name: Option<String>,
    /// Byte offset in the enclosing item; `None` after an item of unknown
    /// size (an opaque custom type).
    pub offset: Option<usize>,
    /// Bytes of one element; `None` for an opaque custom type.
    pub itemsize: Option<usize>,
    /// The repeat count (`"3f"`: 3); for `s` and `p` the string's length.
    pub count: usize,
    /// Sub-array dimensions (`"(2,3)f"`: `[2, 3]`); empty if none.
    pub shape: Vec<usize>,
    /// Byte order, the native one resolved.
    pub byte_order: ByteOrder,
    /// The members of a struct, or the layout a `[struct$...]` /
    /// `[buffer$...]` custom type's payload describes; empty otherwise.
    pub fields: Vec<Field>,
    /// The custom type, for [`FormatKind::Custom`].
    pub custom: Option<Custom>,
}

impl Field {
    /// Whether the order of its bytes means something: numbers and
    /// characters of more than one byte.
    fn byte_order_matters(&self) -> bool {
        !matches!(
            self.kind,
            FormatKind::Struct | FormatKind::Custom | FormatKind::Padding
        ) && self.itemsize.is_none_or(|n| n > 1)
    }
}

/// Fields are equal when they lay out the same values: the same kind,
/// sizes, offset, count, sub-array, name, members and custom alternative,
/// and the same byte order where it matters. The code letter and the
/// prefix that said it are not compared: `'i'` and `"=l"` are both 4-byte
/// signed integers, `"f"`, `"=f"` and `"<f"` (on a little-endian target) the
/// same float.
impl PartialEq for Field {
    fn eq(&self, other: &Field) -> bool {
        let chosen = |f: &Field| f.custom.as_ref().map(|c| (c.id.clone(), c.payload.clone()));
        self.kind == other.kind
            && self.itemsize == other.itemsize
            && self.offset == other.offset
            && self.count == other.count
            && self.shape == other.shape
            && self.name == other.name
            && self.fields == other.fields
            && chosen(self) == chosen(other)
            && (!self.byte_order_matters() || self.byte_order == other.byte_order)
    }
}

/// A parsed format string: its fields with their offsets, item size and
/// the canonical string pyxbuf writes for it (`pyxbuf_format_write`).
///
/// Formats compare equal when they describe the same item (see
/// [`Field`]'s `PartialEq`), whichever way they were spelled: JAX's `"=f"`,
/// NumPy's `"f"` and an exporter's `"<f"` are one format on a little-endian
/// machine.
///
/// ```
/// use pyxbuf::{ByteOrder, Format, FormatKind};
///
/// let numpy: Format = "f".parse().unwrap();
/// let jax = Format::parse(c"=f").unwrap();
/// let exporter = Format::parse(c"<f").unwrap();
/// assert!(numpy == jax && (exporter == numpy) == cfg!(target_endian = "little"));
/// assert_eq!(numpy.kind(), FormatKind::Float);
/// assert_eq!(numpy.itemsize(), Some(4));
/// assert_eq!(numpy.byte_order(), Some(ByteOrder::NATIVE));
/// assert!(numpy.is_of::<f32>() && !numpy.is_of::<i32>());
/// assert_eq!(numpy == Format::parse(c">f").unwrap(), cfg!(target_endian = "big"));
///
/// // A struct: fields with names and offsets (native mode aligns them).
/// let point = Format::parse(c"T{b:tag:d:x:}").unwrap();
/// assert_eq!(point.kind(), FormatKind::Struct);
/// let members = &point.fields()[0].fields;
/// assert_eq!(members[1].name.as_deref(), Some("x"));
/// assert_eq!(members[1].offset, Some(8));
/// assert_eq!(point.itemsize(), Some(16));
///
/// // A custom type: id, payload and every alternative.
/// let bf16 = Format::parse(c"[jax$bf16;ml_dtypes$bfloat16]").unwrap();
/// assert_eq!(bf16.kind(), FormatKind::Custom);
/// let custom = bf16.custom().unwrap();
/// assert_eq!((custom.id.as_str(), custom.payload.as_str()), ("ml_dtypes", "bfloat16"));
/// assert_eq!(custom.alternatives, ["jax$bf16", "ml_dtypes$bfloat16"]);
/// assert!(bf16.is_of::<half::bf16>());
///
/// // Malformed: the parser's message and position, no Python involved.
/// let err = Format::parse(c"T{f").unwrap_err();
/// assert!(err.to_string().contains("T{"), "{err}");
/// ```
#[derive(Clone)]
pub struct Format {
    canonical: CString,
    itemsize: Option<usize>,
    alignment: usize,
    fields: Vec<Field>,
}

/// Why a format string did not parse: the C parser's code, the byte
/// position it points at and its message. No Python exception is involved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FormatError {
    /// The `PYXBUF_E*` code (`PYXBUF_EFORMAT` for a malformed string).
    pub code: i32,
    /// The byte of the string the error refers to, when known.
    pub position: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FormatError {}

impl FormatError {
    fn from_c(err: &sys::pyxbuf_error, code: i32) -> FormatError {
        FormatError {
            code,
            position: usize::try_from(err.position).ok(),
            message: c_error_message(err),
        }
    }
}

/// The message a C function left in a `pyxbuf_error` (up to its NUL).
pub(crate) fn c_error_message(err: &sys::pyxbuf_error) -> String {
    let bytes = err.message.map(|c| c as u8);
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A parsed `pyxbuf_format`, cleared on drop.
struct Parsed(sys::pyxbuf_format);

impl Drop for Parsed {
    fn drop(&mut self) {
        // SAFETY: a descriptor from a successful parse, cleared once.
        unsafe { sys::pyxbuf_format_clear(&mut self.0) }
    }
}

impl Parsed {
    fn parse(format: &CStr) -> Result<Parsed, FormatError> {
        let mut f = MaybeUninit::<sys::pyxbuf_format>::zeroed();
        let mut err = sys::pyxbuf_error::default();
        // SAFETY: a NUL-terminated string, an output descriptor and an error
        // record, all alive for the call.
        let rc = unsafe { sys::pyxbuf_format_parse(format.as_ptr(), f.as_mut_ptr(), &mut err) };
        if rc != 0 {
            return Err(FormatError::from_c(&err, rc));
        }
        // SAFETY: the parse succeeded, so the descriptor is initialised.
        Ok(Parsed(unsafe { f.assume_init() }))
    }

    fn nodes(&self) -> &[sys::pyxbuf_format_node] {
        // SAFETY: the descriptor holds `nnodes` nodes while it lives.
        unsafe {
            std::slice::from_raw_parts(sys::pyxbuf_format_nodes(&self.0), self.0.nnodes as usize)
        }
    }

    fn dims(&self) -> &[i64] {
        let n = self.0.ndims.max(0) as usize;
        if n == 0 {
            return &[];
        }
        // SAFETY: the descriptor holds `ndims` dimensions while it lives.
        unsafe { std::slice::from_raw_parts(sys::pyxbuf_format_dims(&self.0), n) }
    }

    /// `pyxbuf_format_write`'s canonical string.
    fn canonical(&self) -> Result<CString, FormatError> {
        let mut buf = vec![0u8; 32];
        loop {
            let mut len = 0usize;
            let mut err = sys::pyxbuf_error::default();
            // SAFETY: a parsed descriptor, a buffer of `buf.len()` bytes and
            // out-pointers alive for the call.
            let rc = unsafe {
                sys::pyxbuf_format_write(
                    &self.0,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut len,
                    &mut err,
                )
            };
            if rc == sys::PYXBUF_ENOSPACE && len >= buf.len() {
                buf.resize(len + 1, 0);
                continue;
            }
            if rc != 0 {
                return Err(FormatError::from_c(&err, rc));
            }
            buf.truncate(len);
            return CString::new(buf).map_err(|_| FormatError {
                code: sys::PYXBUF_EFORMAT,
                position: None,
                message: "pyxbuf: the canonical format string contains NUL".to_owned(),
            });
        }
    }

    /// The fields under node `parent`, in order.
    fn children(&self, parent: &sys::pyxbuf_format_node) -> Vec<Field> {
        let nodes = self.nodes();
        let mut out = Vec::with_capacity(parent.nchildren.max(0) as usize);
        let mut i = parent.first_child;
        while i > 0 && (i as usize) < nodes.len() && out.len() < parent.nchildren as usize {
            let n = &nodes[i as usize];
            out.push(self.field(n));
            i = n.next;
        }
        out
    }

    fn field(&self, n: &sys::pyxbuf_format_node) -> Field {
        let code = u8::try_from(n.code)
            .ok()
            .filter(|_| n.kind == sys::PYXBUF_FMT_SCALAR);
        let kind = match (n.kind, code) {
            (sys::PYXBUF_FMT_STRUCT, _) => FormatKind::Struct,
            (sys::PYXBUF_FMT_CUSTOM, _) => FormatKind::Custom,
            (sys::PYXBUF_FMT_PADDING, _) => FormatKind::Padding,
            _ if n.flags & sys::PYXBUF_FMTN_POINTER != 0 => FormatKind::Pointer,
            _ if n.flags & sys::PYXBUF_FMTN_COMPLEX != 0 => FormatKind::Complex,
            (_, Some(c)) => scalar_kind(c),
            (_, None) => FormatKind::Padding,
        };
        // SAFETY: the node's strings point into the string parsed, which
        // outlives this descriptor, for the lengths given.
        let name = unsafe { text(n.name, n.name_len) };
        let custom = (n.kind == sys::PYXBUF_FMT_CUSTOM).then(|| {
            // SAFETY: as above.
            let chosen = unsafe { text(n.custom, n.custom_len) }.unwrap_or_default();
            // SAFETY: as above.
            let all = unsafe { text(n.alternatives, n.alternatives_len) }.unwrap_or_default();
            let (id, payload) = chosen.split_once('$').unwrap_or((&chosen, ""));
            Custom {
                id: id.to_owned(),
                payload: payload.to_owned(),
                alternatives: all.split(';').map(str::to_owned).collect(),
            }
        });
        let dims = self.dims();
        let shape = (n.ndim > 0)
            .then(|| dims.get(n.dims_start as usize..(n.dims_start + n.ndim) as usize))
            .flatten()
            .unwrap_or(&[]);
        Field {
            kind,
            code: code.map(char::from),
            name,
            offset: usize::try_from(n.offset).ok(),
            itemsize: usize::try_from(n.itemsize).ok(),
            count: usize::try_from(n.repeat).unwrap_or(0),
            shape: shape.iter().map(|&d| d.max(0) as usize).collect(),
            byte_order: ByteOrder::of_mode(n.byte_order),
            fields: self.children(n),
            custom,
        }
    }
}

/// The text of a node's (pointer, length) string, `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn text(p: *const std::ffi::c_char, len: i32) -> Option<String> {
    if p.is_null() || len < 0 {
        return None;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) };
    Some(String::from_utf8_lossy(bytes).into_owned())
}

fn scalar_kind(code: u8) -> FormatKind {
    match code {
        b'b' | b'h' | b'i' | b'l' | b'q' | b'n' => FormatKind::SignedInt,
        b'B' | b'H' | b'I' | b'L' | b'Q' | b'N' => FormatKind::UnsignedInt,
        b'e' | b'f' | b'd' | b'g' => FormatKind::Float,
        b'?' => FormatKind::Bool,
        b'c' => FormatKind::Char,
        b's' => FormatKind::Bytes,
        b'p' => FormatKind::PascalString,
        b'w' | b'u' => FormatKind::Unicode,
        b'P' => FormatKind::Pointer,
        b'O' => FormatKind::Object,
        _ => FormatKind::Padding,
    }
}

impl Format {
    /// Parse `format` with pyxbuf's parser (`pyxbuf_format_parse`).
    pub fn parse(format: &CStr) -> Result<Format, FormatError> {
        let parsed = Parsed::parse(format)?;
        let nodes = parsed.nodes();
        let fields = nodes
            .first()
            .map(|root| parsed.children(root))
            .unwrap_or_default();
        Ok(Format {
            canonical: parsed.canonical()?,
            itemsize: usize::try_from(parsed.0.itemsize).ok(),
            alignment: parsed.0.alignment.max(1) as usize,
            fields,
        })
    }

    /// The format of `T`'s items ([`Element::FORMAT`]).
    ///
    /// ```
    /// use pyxbuf::Format;
    /// assert_eq!(Format::of::<i16>(), Format::parse(c"=h").unwrap());
    /// ```
    pub fn of<T: Element>() -> Format {
        // Every Element's FORMAT parses (the element tests hold them to it).
        Format::parse(T::FORMAT).unwrap_or_else(|e| panic!("{:?}: {e}", T::FORMAT))
    }

    /// The canonical string (`pyxbuf_format_write`): the byte-order prefix
    /// only where it changes, repeat counts merged, names and sub-arrays
    /// kept, custom types with all their alternatives. Parsing it gives the
    /// same layout. Spellings of one format may keep different prefixes
    /// (`"=f"`, `"<f"`): compare [`Format`]s, not strings.
    pub fn canonical(&self) -> &CStr {
        &self.canonical
    }

    /// Bytes of one item; `None` when it holds a custom type whose size
    /// nobody registered (an opaque one). A view's own `itemsize`
    /// ([`item_size`](crate::PyXUntypedBuffer::item_size)) is authoritative
    /// where they differ (NumPy omits a struct's trailing padding).
    pub fn itemsize(&self) -> Option<usize> {
        self.itemsize
    }

    /// The item's alignment in bytes (1 in packed modes: `=`, `<`, `>`, `^`).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The top-level fields, in order (one for `"f"` or `"T{...}"`, two for
    /// `"fi"`).
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The one plain item the format is -- one field, no repeat count (but
    /// a string's length, `"5s"`), no sub-array -- or `None` for anything
    /// more (several fields, `"3f"`).
    pub fn single(&self) -> Option<&Field> {
        let strings = |f: &Field| matches!(f.kind, FormatKind::Bytes | FormatKind::PascalString);
        match self.fields.as_slice() {
            // A string's count is its length: still one item.
            [f] if (f.count == 1 || strings(f)) && f.shape.is_empty() => Some(f),
            _ => None,
        }
    }

    /// The item's kind: that of its one plain field ([`single`](Self::single)),
    /// [`FormatKind::Struct`] otherwise (several fields, a repeat count, a
    /// sub-array, or `T{...}` itself).
    pub fn kind(&self) -> FormatKind {
        self.single().map_or(FormatKind::Struct, |f| f.kind)
    }

    /// The byte order of the one plain field; `None` for structs.
    pub fn byte_order(&self) -> Option<ByteOrder> {
        self.single()
            .filter(|f| f.kind != FormatKind::Struct)
            .map(|f| f.byte_order)
    }

    /// The custom type the item is (`[id$payload]`), if it is one.
    pub fn custom(&self) -> Option<&Custom> {
        self.single().and_then(|f| f.custom.as_ref())
    }

    /// Whether a buffer of this format holds `T` items: what
    /// [`PyXUntypedBuffer::is_of`](crate::PyXUntypedBuffer::is_of) decides
    /// for a view (one item of `T`'s kind and size in native byte order; a
    /// custom type by any of its alternatives). An opaque custom type (no
    /// known size) is no `T` here; a view of it has an `itemsize`, which
    /// the view's `is_of` uses.
    pub fn is_of<T: Element>(&self) -> bool {
        let size = self.itemsize.map_or(-1, |n| n as isize);
        // SAFETY: a NUL-terminated string.
        unsafe { element::matches_ptr::<T>(self.canonical.as_ptr(), size) }
    }
}

impl PartialEq for Format {
    fn eq(&self, other: &Format) -> bool {
        self.itemsize == other.itemsize && self.fields == other.fields
    }
}

impl fmt::Debug for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Format")
            .field("canonical", &self.canonical)
            .field("itemsize", &self.itemsize)
            .field("fields", &self.fields)
            .finish()
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical.to_string_lossy())
    }
}

impl FromStr for Format {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Format, FormatError> {
        let c = CString::new(s).map_err(|e| FormatError {
            code: sys::PYXBUF_EFORMAT,
            position: Some(e.nul_position()),
            message: format!(
                "pyxbuf: the format string {s:?} contains NUL at position {}; a format \
                 string ends at its first NUL",
                e.nul_position()
            ),
        })?;
        Format::parse(&c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem;

    fn f(s: &str) -> Format {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn spellings_of_one_format_are_equal() {
        if cfg!(target_endian = "big") {
            return; // the spellings below name little-endian as native
        }
        for same in [["f", "=f", "<f", "@f", "^f"], ["i", "=l", "<i", "=i", "@i"]] {
            for s in same {
                assert_eq!(f(s), f(same[0]), "{s:?} and {:?}", same[0]);
            }
        }
        assert_ne!(f("f"), f(">f"));
        assert_ne!(f("f"), f("i"));
        assert_eq!(f(">B"), f("<B"), "one byte has no order");
        assert_ne!(
            f("bi"),
            f("=bi"),
            "native mode aligns the int: other offsets"
        );
        assert_ne!(f("T{f:a:}"), f("T{f:b:}"), "names are part of a struct");
        assert_eq!(
            f("[jax$bf16;ml_dtypes$bfloat16]"),
            f("[ml_dtypes$bfloat16]")
        );
        // The canonical strings keep what they must: parsing them agrees.
        for s in [
            "=f",
            "<T{f:a:}",
            "T{b:tag:d:x:}",
            "3x",
            "(2,3)f",
            "[foo$bar]",
        ] {
            let c = f(s);
            assert_eq!(Format::parse(c.canonical()).unwrap(), c, "{s:?}");
            assert_eq!(c.to_string(), c.canonical().to_str().unwrap());
        }
    }

    #[test]
    fn kinds_sizes_fields() {
        let cases = [
            ("b", FormatKind::SignedInt, 1),
            ("Q", FormatKind::UnsignedInt, 8),
            ("e", FormatKind::Float, 2),
            ("Zd", FormatKind::Complex, 16),
            ("D", FormatKind::Complex, 16),
            ("?", FormatKind::Bool, 1),
            ("c", FormatKind::Char, 1),
            ("5s", FormatKind::Bytes, 5),
            ("w", FormatKind::Unicode, 4),
            ("P", FormatKind::Pointer, mem::size_of::<usize>()),
            ("&d", FormatKind::Pointer, mem::size_of::<usize>()),
            ("O", FormatKind::Object, mem::size_of::<usize>()),
            ("fi", FormatKind::Struct, 8),
            ("3f", FormatKind::Struct, 12),
            ("(2,3)f", FormatKind::Struct, 24),
            ("T{f}", FormatKind::Struct, 4),
        ];
        for (s, kind, size) in cases {
            assert_eq!((f(s).kind(), f(s).itemsize()), (kind, Some(size)), "{s:?}");
        }
        let sub = f("(2,3)<h");
        assert_eq!(sub.fields()[0].shape, [2, 3]);
        assert_eq!(sub.fields()[0].byte_order, ByteOrder::Little);
        assert_eq!(f(">d").byte_order(), Some(ByteOrder::Big));
        assert_eq!(f("T{f}").byte_order(), None);
        let padded = f("bxi");
        let offsets: Vec<_> = padded.fields().iter().map(|x| (x.kind, x.offset)).collect();
        assert_eq!(
            offsets,
            [
                (FormatKind::SignedInt, Some(0)),
                (FormatKind::Padding, Some(1)),
                (FormatKind::SignedInt, Some(4))
            ]
        );
        assert_eq!(f("").fields(), []);
    }

    #[test]
    fn custom_types() {
        let opaque = f("[mylib$q8_8]");
        assert_eq!(opaque.itemsize(), None);
        let c = opaque.custom().unwrap();
        assert_eq!((c.id.as_str(), c.payload.as_str()), ("mylib", "q8_8"));
        let payload = f("[struct$<f]");
        assert_eq!(payload.kind(), FormatKind::Custom);
        assert_eq!(payload.fields()[0].fields[0].kind, FormatKind::Float);
        assert!(payload.is_of::<f32>() && f("[ml_dtypes$bfloat16]").is_of::<half::bf16>());
        assert_eq!(Format::of::<half::bf16>(), f("[ml_dtypes$bfloat16]"));
    }

    #[test]
    fn malformed_strings_name_the_position() {
        let err = "(2f".parse::<Format>().unwrap_err();
        assert_eq!((err.code, err.position), (sys::PYXBUF_EFORMAT, Some(2)));
        assert!(err.message.contains("sub-array"), "{err}");
        let err = "f\0i".parse::<Format>().unwrap_err();
        assert_eq!(err.position, Some(1));
        assert!(err.to_string().contains("NUL"), "{err}");
    }
}
