//! Large copies through page-locked staging (issue 40) on the emulated
//! device, from Rust: `to_device` of a `Vec`'s exporter and `copy_to_host`
//! into a new `Vec`, crossing every chunk boundary, with the configuration
//! set through [`TransferConfig`].
#![cfg(feature = "emulated-device")]

mod common;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyxbuf::{Device, Exclusive, PinnedPoolStats, PyXBuffer, TransferConfig};

const EMU: Device = Device::Emulated { id: 0 };
const CHUNK: u64 = 64 << 10;
/// The configuration is process-wide: one test at a time changes it.
static CONFIG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn takes() -> u64 {
    let s = PinnedPoolStats::current();
    s.allocations + s.reuses
}

/// Until the pool's grower has served every request: a copy that finds no
/// idle block goes without one and asks the pool to grow for the next.
fn settle() {
    for _ in 0..10_000 {
        if PinnedPoolStats::current().background_pending == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("the pinned pool's grower left requests unserved for 10 s");
}

/// Up, back into a new `Vec`, and back into a new host exporter; the host
/// exporter is returned for the caller to check.
fn round_trip<'py>(py: Python<'py>, values: &[u8]) -> Bound<'py, PyAny> {
    let n = values.len();
    let host = pyxbuf::export::new_exporter::<u8>(py, &[n], Device::Cpu).unwrap();
    PyXBuffer::<u8, Exclusive>::get(&host)
        .unwrap()
        .as_mut_slice()
        .unwrap()
        .copy_from_slice(values);
    let dev = PyXBuffer::<u8>::get(&host).unwrap().to_device(EMU).unwrap();
    let back = PyXBuffer::<u8>::request()
        .device()
        .get(&dev)
        .unwrap()
        .copy_to_host()
        .unwrap();
    assert_eq!(back, values, "{n} bytes");
    PyXBuffer::<u8>::request()
        .device()
        .get(&dev)
        .unwrap()
        .to_device(Device::Cpu)
        .unwrap()
}

#[test]
fn round_trips_through_staging_at_every_chunk_boundary() {
    let _one = CONFIG.lock().unwrap();
    let before = TransferConfig::current();
    TransferConfig {
        enabled: true,
        threshold: 1,
        chunk: CHUNK,
        buffers: 3,
        threads: 3,
        pool_cap: 64 * CHUNK,
        device_pool: true,
        device_pool_shareable: false,
        device_pool_release_threshold: 0,
    }
    .apply()
    .unwrap();
    Python::attach(|py| {
        pyxbuf::emulated::register().unwrap();
        let chunk = CHUNK as usize;
        for n in [1, chunk - 1, chunk, chunk + 1, 5 * chunk + 7] {
            let values: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
            // Cold: the pool grows what it lacked (a result's block once its
            // size has missed twice).
            drop(round_trip(py, &values));
            drop(round_trip(py, &values));
            settle();
            let taken = takes();
            let used = PinnedPoolStats::current().used_bytes;
            let host_again = round_trip(py, &values);
            if n >= chunk {
                assert!(
                    takes() >= taken + 3,
                    "{n} bytes: both copies and the result pooled"
                );
                // Back to the host as a new exporter: pooled page-locked
                // memory, read as ordinary host memory.
                assert!(PinnedPoolStats::current().used_bytes >= used + n as u64);
            } else {
                assert_eq!(
                    takes(),
                    taken,
                    "{n} bytes: under 64 KiB every copy is direct"
                );
            }
            assert_eq!(
                PyXBuffer::<u8>::get(&host_again)
                    .unwrap()
                    .as_slice()
                    .unwrap(),
                &values[..]
            );
        }
    });
    before.apply().unwrap();
}

#[test]
fn a_bad_configuration_is_a_value_error_naming_the_field() {
    let _one = CONFIG.lock().unwrap();
    let c = TransferConfig::current();
    let err = TransferConfig { chunk: 4096, ..c }.apply().unwrap_err();
    assert_eq!(
        err.to_string(),
        "TransferConfig::apply: chunk is 4096; it must be 65536..1073741824 bytes (64 KiB to 1 GiB)"
    );
    Python::attach(|py| {
        let py_err: PyErr = err.into();
        assert!(py_err.is_instance_of::<PyValueError>(py));
    });
    assert_eq!(
        TransferConfig::current(),
        c,
        "a refused configuration changes nothing"
    );
}

/// Issue 47 item 1: safe Rust could set a chunk whose staging arithmetic
/// wrapped (2^64 - 1 MiB: a staged copy of no chunks that reported success;
/// above 3 x 2^62: a 0-byte pooled block a whole chunk was written into).
#[test]
fn a_chunk_or_pool_beyond_the_machine_is_refused_by_apply() {
    let _one = CONFIG.lock().unwrap();
    let c = TransferConfig::current();
    for chunk in [
        u64::MAX - (1 << 20) + 1,
        (3 << 62) | (1 << 20),
        (1 << 30) + 1,
    ] {
        let err = TransferConfig {
            chunk,
            buffers: 8,
            pool_cap: u64::MAX,
            ..c
        }
        .apply()
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("it must be 65536..1073741824 bytes"),
            "{err}"
        );
    }
    let err = TransferConfig {
        pool_cap: u64::MAX,
        ..c
    }
    .apply()
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("pool_cap is 18446744073709551615; it must be at most"),
        "{err}"
    );
    assert_eq!(TransferConfig::current(), c);
    assert!(TransferConfig::check().is_ok());
}

/// Issue 47 part 3: the device pool's knobs beside the staging ones. A
/// threshold of 0 reads back as 0 (the C side's default, 256 MiB, applies).
#[test]
fn the_device_pool_knobs_apply_and_bad_ones_are_refused() {
    let _one = CONFIG.lock().unwrap();
    let c = TransferConfig::current();
    assert!(c.device_pool, "the pool is on by default");
    assert_eq!(c.device_pool_release_threshold, 256 << 20);
    assert!(!c.device_pool_shareable, "the default pool unless asked");
    let off = TransferConfig {
        device_pool: false,
        device_pool_release_threshold: 1 << 20,
        ..c
    };
    off.apply().unwrap();
    assert_eq!(TransferConfig::current(), off);
    let shareable = TransferConfig {
        device_pool_shareable: true,
        ..c
    };
    shareable.apply().unwrap();
    assert_eq!(TransferConfig::current(), shareable);
    off.apply().unwrap();
    let err = TransferConfig {
        device_pool_release_threshold: 1 << 63,
        ..c
    }
    .apply()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "TransferConfig::apply: device_pool_release_threshold is 9223372036854775808; it \
         must be at most 2^63 - 1 bytes (0: the default, 256 MiB)"
    );
    assert_eq!(
        TransferConfig::current(),
        off,
        "a refused configuration changes nothing"
    );
    c.apply().unwrap();
}
