# Two entry points on a fresh machine (Python 3.11 with venv):
#   make demo   - create .venv, install, run the whole workflow on the embedded default
#   make test   - create .venv, install, run the fast test tier (make test-all: everything)
PYTHON ?= python3.11
VENV := .venv
CORES ?= 2

# TORCH_INDEX_URL: where torch/torchvision come from. Empty (default): the pinned PyPI wheels,
# torch 2.14.1 built for CUDA 13.0 (kernels sm_75..sm_120), which need an NVIDIA driver >= 580.
# For an older driver install the same versions from PyTorch's index of a CUDA 12 build, e.g.
#   make venv TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126   (driver >= 525)
# (atat.base.device names the node's driver and the build's needs when `device: cuda` finds no GPU).
TORCH_INDEX_URL ?=
TORCH_PINS := $(shell sed -n 's/^ *"\(torch\(vision\)\{0,1\}==[^"]*\)".*/\1/p' pyproject.toml)
# The environment comes from the locks (every package, direct or not, at its version, each file
# checked against its sha256; `make lock` rewrites them from pyproject.toml): requirements.lock
# is the runtime (make venv, make demo), requirements-test.lock adds the [test] and [dev]
# extras (make venv-test: make test, make test-all, .ci/run). A TORCH_INDEX_URL build is outside
# the locks: torch/torchvision from that index, the rest resolved from pyproject.toml's pins.
# OFFLINE_WHEELS=<folder written by make wheelhouse>: install from that folder only, no index.
LOCK := requirements.lock
TEST_LOCK := requirements-test.lock
OFFLINE_WHEELS ?=
PIP_FROM = $(if $(OFFLINE_WHEELS),--no-index --find-links $(OFFLINE_WHEELS) )
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(if $(OFFLINE_WHEELS),,$(VENV)/bin/pip install --quiet --upgrade pip)
	$(if $(TORCH_INDEX_URL),$(VENV)/bin/pip install --quiet --index-url $(TORCH_INDEX_URL) $(TORCH_PINS))
	$(if $(TORCH_INDEX_URL),$(VENV)/bin/pip install --quiet -e .,$(VENV)/bin/pip install --quiet $(PIP_FROM)-r $(LOCK))
	$(VENV)/bin/pip install --quiet $(PIP_FROM)--no-deps -e .
	touch $@

WITH_EXTRAS := '.[test,dev]'
$(VENV)/.installed-test: $(VENV)/.installed $(TEST_LOCK)
	$(if $(TORCH_INDEX_URL),$(VENV)/bin/pip install --quiet -e $(WITH_EXTRAS),$(VENV)/bin/pip install --quiet $(PIP_FROM)-r $(TEST_LOCK))
	touch $@

# The locks from pyproject.toml (uv, from the [dev] extra): Linux x86_64, Python 3.11, every
# file's sha256 (PyPI's). The runtime lock is constrained by the test lock: one version each.
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28
lock: venv-test
	$(VENV)/bin/uv pip compile pyproject.toml --all-extras $(LOCK_FLAGS) -o $(TEST_LOCK)
	$(VENV)/bin/uv pip compile pyproject.toml -c $(TEST_LOCK) $(LOCK_FLAGS) -o $(LOCK)

# Every file the test lock names (wheels; connection-pool 0.0.3 exists only as an sdist and is
# built at install time with the locked setuptools), downloaded and checked against the lock's
# sha256, for a machine without internet (same platform: Linux x86_64, Python 3.11):
#   make venv OFFLINE_WHEELS=wheelhouse     (or venv-test; pip's --no-index --find-links)
# WHEELHOUSE_LOCK=<a lock file> downloads that lock's files instead (tests/test_lock.py).
WHEELHOUSE ?= wheelhouse
WHEELHOUSE_LOCK ?= $(TEST_LOCK)
wheelhouse:
	rm -rf $(WHEELHOUSE).part
	$(PYTHON) -m pip download --quiet --no-deps --require-hashes -r $(WHEELHOUSE_LOCK) -d $(WHEELHOUSE).part
	rm -rf $(WHEELHOUSE)
	mv $(WHEELHOUSE).part $(WHEELHOUSE)

.PHONY: venv venv-test lock wheelhouse demo smoke test test-all test-paper-shapes dry-run-paper bench bench-gpu forecast float-paths readme-tables power
venv: $(VENV)/.installed
venv-test: $(VENV)/.installed-test

# --max-jobs-per-timespan 1000/60s: Snakemake's default (100/1s) re-runs its scheduler every
# second, re-evaluating the params of every ready job each time; on the demo that took 25-45%
# of one of the 2 cores (issue 16, measured 2026-12-01). Locally the limit never binds; a job
# that finishes still wakes the scheduler at once. --rerun-triggers: the profile's policy
# (profiles/slurm/config.yaml: an edited adapter script alone reruns nothing). Last, the HTML
# report of every table and figure the run built (results/report.html).
demo: venv
	$(VENV)/bin/snakemake all --configfile config/demo.yaml --cores $(CORES) --keep-going --rerun-incomplete --rerun-triggers mtime params input software-env --show-failed-logs --max-jobs-per-timespan 1000/60s --logger rich --set-threads train_model=1 autoattack=1 invert=1 measure_hsic=1 train_generator=1 train_evaluation_model=1 train_face_embedding=1 train_instrument_classifier=1
	-$(VENV)/bin/python -m atat.lab.critical_path
	$(VENV)/bin/snakemake --report results/report.html --configfile config/demo.yaml

# The quick check (README): the tiny test config (.test/tiny) end to end in its own directory
# (SMOKE_DIR, default .smoke/; results/ is not touched), its HTML report, then the list of every
# kind of output it built (python -m atat.lab.smoke; fails naming a missing kind).
SMOKE_DIR ?= .smoke
smoke: venv
	rm -rf $(SMOKE_DIR) && mkdir -p $(SMOKE_DIR)
	$(VENV)/bin/snakemake all -s $(CURDIR)/Snakefile --directory $(SMOKE_DIR) --configfile $(CURDIR)/config/demo.yaml $(CURDIR)/.test/tiny/config.yaml --cores $(CORES) --show-failed-logs --max-jobs-per-timespan 1000/60s --quiet rules
	$(VENV)/bin/snakemake --report results/report.html -s $(CURDIR)/Snakefile --directory $(SMOKE_DIR) --configfile $(CURDIR)/config/demo.yaml $(CURDIR)/.test/tiny/config.yaml
	$(VENV)/bin/python -m atat.lab.smoke $(SMOKE_DIR)

# Test tiers: `make test` is the fast tier (unit and component tests, no Snakemake run;
# goal < 10 min on 2 cores); `make test-all` is everything: also the end-to-end Snakemake runs
# (marker slow), the real one-node SLURM cluster (slurm) and the paper-shapes tier
# (paper_shapes). CI (.ci/run) runs test-all.
FAST := not slow and not slurm and not paper_shapes
test: venv-test
	$(VENV)/bin/python -m pytest -q -m "$(FAST)"

test-all: venv-test
	$(VENV)/bin/python -m pytest -q

# The paper config's rules at the paper's shapes (224/299/1024 px, real architectures and
# weight-file formats) on CPU with random weights and fabricated data: tests/test_paper_shapes.py
test-paper-shapes: venv-test
	$(VENV)/bin/python -m pytest -q -m paper_shapes tests/test_paper_shapes.py

dry-run-paper: venv
	$(VENV)/bin/snakemake -n all

# Each component vs its bare-loop / direct-library limit, side by side (src/atat/lab/bench.py);
# table on the terminal, CSV in results/bench/bench.csv.
bench: venv
	$(VENV)/bin/python -m atat.lab.bench
	$(VENV)/bin/python -m atat.lab.forecast calibrate

# The campaign's cost before the first sbatch (src/atat/lab/forecast.py, docs/forecast.md): per
# rule jobs, GPU-hours, peak GPU memory, the longest job against the profile's max_runtime_min,
# the campaign on GPUS GPUs. CONFIG: overlays as --configfile (empty: the paper config);
# make forecast CONFIG=config/demo.yaml ARGS="--device cpu" forecasts the demo on this CPU.
CONFIG ?=
GPUS ?= 8
forecast: venv
	$(VENV)/bin/python -m atat.lab.forecast $(addprefix --configfile ,$(CONFIG)) --profile profiles/slurm --gpus $(GPUS) $(ARGS)

# The paper config's shapes on the device (ResNet-152 at 224 px training images/s for NoDef and
# AT-AT with channels-last / bf16 autocast beside the paper's fp32, standard AutoAttack images/s
# per eps, PPA at 1024 px, TF32 off inside PGD and AutoAttack): src/atat/lab/bench_gpu.py; CSV in
# results/bench/bench_gpu.csv. On a machine without a GPU: make bench-gpu ARGS=--quick
bench-gpu: venv
	$(VENV)/bin/python -m atat.lab.bench_gpu $(ARGS)

# The demo's NoDef trained once per CPU float path (native kernels, AVX2-limited kernels, two
# threads, another seed) in fresh processes: how much the demo's numbers move between machines
# (src/atat/lab/float_paths.py; table on the terminal, CSV in results/bench/float_paths.csv).
float-paths: venv
	$(VENV)/bin/python -m atat.lab.float_paths

# The quoted tables of docs/miniature.md (the blocks between `<!-- from results/... -->` and
# `<!-- end ... -->`) replaced by a run's files, verbatim; RUN is the directory that ran
# `make demo` (default: this one). The prose around them stays by hand.
RUN ?= .
readme-tables: venv
	$(VENV)/bin/python -m atat.lab.readme_blocks docs/miniature.md --root $(RUN)

# The claims analysis's power at a finished run's sample sizes (issue 45): the class ICC of
# AttAcc@1, the power of every claim part under the plan, and the paired design's projection to
# more images per class (docs/power.md). RUN: the directory that ran the workflow; CONFIG: the
# overlays it ran with (default the demo).
POWER_OUT ?= docs/power.md
power: venv
	$(VENV)/bin/python -m atat.lab.power --run $(RUN) --configfile config/config.yaml $(or $(CONFIG),config/demo.yaml) --out $(POWER_OUT)
