//! Issue 27: formats in the safe API -- a view's format parsed
//! ([`Format`]), compared by meaning across producers, and probing item
//! types without building an exception per miss.

mod common;

use common::eval;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyxbuf::{ByteOrder, Format, FormatKind, PyXBuffer, PyXUntypedBuffer};

#[test]
fn one_float_format_from_numpy_jax_and_an_exporter() {
    Python::attach(|py| {
        let numpy = eval(py, "np.zeros(3, np.float32)", &[]);
        let numpy = PyXUntypedBuffer::get(&numpy)
            .unwrap()
            .parsed_format()
            .unwrap();
        // What jax.Array's buffer protocol writes (memoryview(jnp.ones(3)).format),
        // and a little-endian exporter's explicit prefix.
        let jax = Format::parse(c"=f").unwrap();
        let exporter = Format::parse(c"<f").unwrap();
        assert_eq!(numpy, jax);
        assert_eq!(numpy == exporter, cfg!(target_endian = "little"));
        assert_eq!(numpy, Format::of::<f32>());
        assert_eq!(
            (numpy.kind(), numpy.itemsize()),
            (FormatKind::Float, Some(4))
        );
        assert_eq!(numpy.byte_order(), Some(ByteOrder::NATIVE));
        // The strings differ; the canonical one keeps what the prefix changes.
        assert_eq!(jax.canonical(), c"=f");
        assert_eq!(numpy.canonical(), c"f");
    });
}

#[test]
fn numpy_structured_dtypes_give_fields_with_offsets() {
    Python::attach(|py| {
        let dtype = "np.dtype([('id', '<i4'), ('xy', '<f8', (2,)), ('tag', 'S3')], align=True)";
        let a = eval(py, &format!("np.zeros(2, dtype={dtype})"), &[]);
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        let format = buf.parsed_format().unwrap();
        assert_eq!(format.kind(), FormatKind::Struct);
        let members: Vec<_> = format.fields()[0]
            .fields
            .iter()
            .filter(|f| f.kind != FormatKind::Padding)
            .collect();
        let described: Vec<_> = members
            .iter()
            .map(|f| {
                (
                    f.name.clone().unwrap(),
                    f.kind,
                    f.offset.unwrap(),
                    f.shape.clone(),
                )
            })
            .collect();
        let offsets: Vec<usize> =
            eval(py, &format!("[f[1] for f in {dtype}.fields.values()]"), &[])
                .extract()
                .unwrap();
        assert_eq!(
            described,
            [
                ("id".to_owned(), FormatKind::SignedInt, offsets[0], vec![]),
                ("xy".to_owned(), FormatKind::Float, offsets[1], vec![2]),
                ("tag".to_owned(), FormatKind::Bytes, offsets[2], vec![]),
            ]
        );
        assert_eq!(members[0].byte_order, ByteOrder::Little);
        assert_eq!(members[2].count, 3, "a string's count is its length");
    });
}

#[test]
fn probing_types_raises_nothing() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(4, dtype=np.int16)", &[]);
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        assert!(buf.is_of::<i16>() && !buf.is_of::<u16>() && !buf.is_of::<f32>());
        assert!(buf.try_typed::<f64>().is_none());
        assert!(PyErr::take(py).is_none(), "a miss sets no exception");
        let typed = buf.try_typed::<i16>().unwrap();
        assert_eq!(
            typed.iter().unwrap().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // By value: the view comes back on a miss, to try the next type.
        let buf = buf.try_into_typed::<u8>().unwrap_err();
        let typed: PyXBuffer<'_, i16> = buf.try_into_typed().unwrap();
        assert_eq!(typed.item_count(), 4);
    });
}

#[test]
fn custom_formats_give_id_and_payload() {
    Python::attach(|py| {
        let a = eval(
            py,
            "np.zeros(2, dtype=__import__('ml_dtypes').bfloat16)",
            &[],
        );
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        let format = buf.parsed_format().unwrap();
        assert_eq!(format.kind(), FormatKind::Custom);
        let custom = format.custom().unwrap();
        assert_eq!(
            (custom.id.as_str(), custom.payload.as_str()),
            ("ml_dtypes", "bfloat16")
        );
        assert_eq!(format, Format::of::<half::bf16>());
        assert!(buf.is_of::<half::bf16>() && !buf.is_of::<half::f16>());
    });
}

#[test]
fn an_unparsable_format_is_a_value_error_naming_it() {
    Python::attach(|py| {
        // ctypes writes "X{}" for function pointers, which no parser reads.
        let a = eval(py, "(__import__('ctypes').CFUNCTYPE(None) * 2)()", &[]);
        let buf = PyXUntypedBuffer::get(&a).unwrap();
        assert_eq!(buf.format(), c"X{}");
        let err = buf.parsed_format().unwrap_err();
        assert!(err.is_instance_of::<PyValueError>(py), "{err}");
        let msg = err.value(py).str().unwrap().to_string();
        assert!(
            msg.starts_with("pyxbuf: the buffer of '")
                && msg.contains("has format 'X{}', which pyxbuf cannot parse: ")
                && msg.ends_with("; read it with format() instead"),
            "{msg}"
        );
        assert!(!buf.is_of::<usize>(), "no type matches it");
        // The same parser error without Python.
        let err = "X{}".parse::<Format>().unwrap_err();
        assert!(msg.contains(&err.message), "{msg} / {err}");
    });
}
