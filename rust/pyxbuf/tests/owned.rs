//! PyXBufferOwned: a buffer kept in a #[pyclass], bound again later,
//! dropped from another thread; DevicePtr inside py.detach.

mod common;

use common::{eval, run};
use pyo3::prelude::*;
use pyxbuf::{Exclusive, PyXBuffer, PyXBufferOwned};

#[pyclass]
struct Holder {
    data: PyXBufferOwned<f64>,
}

#[pymethods]
impl Holder {
    fn total(&self, py: Python<'_>) -> f64 {
        self.data.bind(py).as_slice().unwrap().iter().sum()
    }
}

#[pyclass]
struct Writer {
    data: PyXBufferOwned<f64, Exclusive>,
}

#[pymethods]
impl Writer {
    fn fill(&mut self, py: Python<'_>, v: f64) {
        self.data.bind_mut(py).as_mut_slice().unwrap().fill(v);
    }
}

#[test]
fn owned_buffers_live_in_pyclasses() {
    Python::attach(|py| {
        let a = eval(py, "np.arange(4.0)", &[]);
        let holder = Bound::new(
            py,
            Holder {
                data: PyXBuffer::<f64>::get(&a).unwrap().into_owned(),
            },
        )
        .unwrap();
        run(py, "assert h.total() == 6.0", &[("h", holder.as_any())]);
        // The shared borrow lives as long as the holder.
        assert!(PyXBuffer::<f64, Exclusive>::get(&a).is_err());
        drop(holder);
        run(py, "import gc; gc.collect()", &[]);
        let mut w = PyXBuffer::<f64, Exclusive>::get(&a).unwrap().into_owned();
        w.bind_mut(py).as_mut_slice().unwrap()[0] = 9.0;
        let writer = Bound::new(py, Writer { data: w }).unwrap();
        run(py, "w.fill(2.0)", &[("w", writer.as_any())]);
        assert!(
            PyXBuffer::<f64>::get(&a).is_err(),
            "the exclusive borrow is held"
        );
        drop(writer);
        run(py, "import gc; gc.collect()", &[]);
        assert_eq!(
            PyXBuffer::<f64>::get(&a).unwrap().as_slice().unwrap(),
            [2.0; 4]
        );
    });
}

#[test]
fn owned_buffers_cross_threads_and_release_there() {
    let a: Py<PyAny> = Python::attach(|py| eval(py, "np.ones(3)", &[]).unbind());
    let owned = Python::attach(|py| PyXBuffer::<f64>::get(a.bind(py)).unwrap().into_owned());
    let sum = std::thread::spawn(move || {
        let s = Python::attach(|py| owned.bind(py).to_vec().unwrap().iter().sum::<f64>());
        drop(owned); // released on this thread: Drop attaches
        s
    })
    .join()
    .unwrap();
    assert_eq!(sum, 3.0);
    Python::attach(|py| {
        // released: an exclusive borrow is free again
        assert!(PyXBuffer::<f64, Exclusive>::get(a.bind(py)).is_ok());
        let back = PyXBuffer::<f64>::get(a.bind(py))
            .unwrap()
            .into_owned()
            .into_bound(py);
        assert_eq!(back.item_count(), 3);
    });
}
