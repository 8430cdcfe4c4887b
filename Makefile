# pyxbuf's front door. `make demo` and `make test` set up everything they need
# on a fresh machine: a local .venv for Python packages, a CMake build in build/.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
BUILD ?= build
JOBS ?= 2
# CI and `make test` build with -Werror; set WERROR=OFF to iterate.
WERROR ?= ON
CMAKE_ARGS ?=

export PYTHONDONTWRITEBYTECODE := 1
MAKEFLAGS += --no-print-directory

.PHONY: all build test test-c test-python demo clean distclean venv

all: build

venv: $(VENV)/.ready

$(VENV)/.ready: python-tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r python-tests/requirements.txt
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

test-python: build
	PYTHONPATH=$(abspath $(BUILD))/python $(VPY) -m pytest -q python-tests

test: test-c test-python

demo: build
	@PYTHONPATH=$(abspath $(BUILD))/python:$(SITE) $(BUILD)/pyxbuf_demo

clean:
	rm -rf $(BUILD)

distclean: clean
	rm -rf $(VENV)
