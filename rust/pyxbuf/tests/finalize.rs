//! Issue 25, item 2: a `PyXBufferOwned` dropped (or printed) where no
//! thread can attach -- on a Rust thread while the interpreter finalizes,
//! and in a `Py_AtExit` function after it finalized -- is leaked, not a
//! panic, an abort or a thread that never comes back.
//!
//! Each case finalizes the interpreter, so it runs in a child process: the
//! parent test runs this test binary again with only the child test
//! selected and `PYXBUF_FINALIZE_CHILD` set, and reads what it printed.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use pyxbuf::{PyXBuffer, PyXBufferOwned};

const CHILD_ENV: &str = "PYXBUF_FINALIZE_CHILD";

/// Run the child test `name` in a new process of this binary; its exit
/// status and everything it printed.
fn run_child(name: &str) -> (std::process::ExitStatus, String) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A child whose thread hangs in attach must not hang the suite.
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Whether this process is the child running `name` (else the child test
/// is a no-op: `cargo test -- --ignored` must not finalize the suite's
/// interpreter).
fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// An owned, shared view of a fresh bytearray.
fn owned_view() -> PyXBufferOwned<u8> {
    Python::attach(|py| {
        let data = PyByteArray::new(py, b"abc");
        let buf = PyXBuffer::<u8>::get(data.as_any()).unwrap();
        assert_eq!(buf.as_slice(), Some(&b"abc"[..]));
        buf.into_owned()
    })
}

/// Finalize the interpreter from this thread (the one that initialized it).
fn finalize() {
    // SAFETY: the interpreter was initialized by this thread (PyO3's
    // initialize, which released the GIL); PyGILState_Ensure takes it back
    // on this thread's state, and nothing of Python is used afterwards.
    let rc = unsafe {
        ffi::PyGILState_Ensure();
        ffi::Py_FinalizeEx()
    };
    say(&format!("Py_FinalizeEx returned {rc}"));
}

/// Dropped at module teardown, inside `Py_FinalizeEx` (the interpreter is
/// finalizing): lets the dropper thread drop its handle and waits for it.
#[pyclass]
struct Gate {
    go: Mutex<Option<mpsc::Sender<()>>>,
    done: Mutex<Option<mpsc::Receiver<String>>>,
}

impl Drop for Gate {
    fn drop(&mut self) {
        // SAFETY: reading interpreter flags is allowed at any time.
        let initialized = unsafe { ffi::Py_IsInitialized() };
        say(&format!(
            "gate: finalizing (Py_IsInitialized() = {initialized})"
        ));
        let go = self.go.lock().unwrap().take().unwrap();
        let done = self.done.lock().unwrap().take().unwrap();
        go.send(()).unwrap();
        match done.recv_timeout(Duration::from_secs(30)) {
            Ok(debug) => say(&format!("dropper: dropped the handle; Debug said {debug}")),
            Err(mpsc::RecvTimeoutError::Timeout) => say("dropper: still stuck after 30 s"),
            Err(mpsc::RecvTimeoutError::Disconnected) => say("dropper: the thread died"),
        }
    }
}

const THREAD_CHILD: &str = "child_drop_on_a_thread_while_finalizing";
const AT_EXIT_CHILD: &str = "child_drop_in_py_at_exit";

#[test]
#[ignore = "run in a child process by owned_handle_dropped_on_a_thread_while_finalizing"]
fn child_drop_on_a_thread_while_finalizing() {
    if !is_child(THREAD_CHILD) {
        return;
    }
    Python::initialize();
    let owned = owned_view();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<String>();
    let dropper = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        // The interpreter is finalizing now: no thread can attach.
        let debug = format!("{owned:?}");
        drop(owned);
        done_tx.send(debug).unwrap();
    });
    Python::attach(|py| {
        let gate = Gate {
            go: Mutex::new(Some(go_tx)),
            done: Mutex::new(Some(done_rx)),
        };
        let gate = Bound::new(py, gate).unwrap();
        let main = py.import("__main__").unwrap();
        main.setattr("gate", gate).unwrap();
    });
    finalize();
    let joined = dropper.join().is_ok();
    say(&format!("dropper joined: {joined}"));
}

/// The handle the `Py_AtExit` function drops.
static AT_EXIT_HANDLE: Mutex<Option<PyXBufferOwned<u8>>> = Mutex::new(None);

extern "C" fn drop_at_exit() {
    let owned = AT_EXIT_HANDLE.lock().unwrap().take().unwrap();
    // SAFETY: reading interpreter flags is allowed at any time.
    let initialized = unsafe { ffi::Py_IsInitialized() };
    say(&format!("at exit: Py_IsInitialized() = {initialized}"));
    let debug = format!("{owned:?}");
    drop(owned);
    say(&format!("at exit: dropped the handle; Debug said {debug}"));
}

#[test]
#[ignore = "run in a child process by owned_handle_dropped_in_py_at_exit"]
fn child_drop_in_py_at_exit() {
    if !is_child(AT_EXIT_CHILD) {
        return;
    }
    Python::initialize();
    *AT_EXIT_HANDLE.lock().unwrap() = Some(owned_view());
    // SAFETY: registers a function with the C signature Py_AtExit expects;
    // the interpreter is initialized.
    assert_eq!(unsafe { ffi::Py_AtExit(Some(drop_at_exit)) }, 0);
    finalize();
}

#[test]
fn owned_handle_dropped_on_a_thread_while_finalizing() {
    let (status, out) = run_child(THREAD_CHILD);
    assert!(status.success(), "the child failed ({status}):\n{out}");
    assert!(out.contains("Py_IsInitialized() = 0"), "{out}");
    assert!(
        out.contains("dropper: dropped the handle; Debug said PyXBufferOwned")
            && out.contains("interpreter unavailable"),
        "{out}"
    );
    assert!(out.contains("Py_FinalizeEx returned 0"), "{out}");
    assert!(out.contains("dropper joined: true"), "{out}");
}

#[test]
fn owned_handle_dropped_in_py_at_exit() {
    let (status, out) = run_child(AT_EXIT_CHILD);
    assert!(status.success(), "the child failed ({status}):\n{out}");
    assert!(out.contains("at exit: Py_IsInitialized() = 0"), "{out}");
    assert!(
        out.contains("at exit: dropped the handle; Debug said PyXBufferOwned")
            && out.contains("interpreter unavailable"),
        "{out}"
    );
    assert!(out.contains("Py_FinalizeEx returned 0"), "{out}");
}
