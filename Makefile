# Two entry points on a fresh machine (Python 3.11 with venv):
#   make demo   - create .venv, install, run the whole workflow on the embedded default
#   make test   - create .venv, install, run the fast test tier (make test-all: everything)
PYTHON ?= python3.11
VENV := .venv
CORES ?= 2

# TORCH_INDEX_URL: where torch/torchvision come from. Empty (default): the pinned PyPI wheels,
# torch 2.14.1 built for CUDA 13.0 (kernels sm_75..sm_120), which need an NVIDIA driver >= 580.
# For an older driver (525-579) the same versions built for CUDA 12 from PyTorch's index, e.g.
#   make venv TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# (atat.base.device names the node's driver and the build's needs when `device: cuda` finds no GPU).
# That build has its own locks, requirements-<backend>.lock and requirements-test-<backend>.lock
# (make lock-torch, on a machine that reaches the index); where they exist the install is
# hash-checked like the default one, else torch/torchvision come from the index and the rest
# is resolved from pyproject.toml's pins, unchecked, and make says so.
# $(VENV)/.torch-index records where the venv's torch came from: another TORCH_INDEX_URL (or
# none after one) rebuilds the venv from scratch (python -m venv --clear).
TORCH_INDEX_URL ?=
TORCH_PINS := $(shell sed -n 's/^ *"\(torch\(vision\)\{0,1\}==[^"]*\)".*/\1/p' pyproject.toml)
TORCH_BACKEND := $(notdir $(patsubst %/,%,$(TORCH_INDEX_URL)))
TORCH_LOCK := requirements-$(TORCH_BACKEND).lock
TORCH_TEST_LOCK := requirements-test-$(TORCH_BACKEND).lock
TORCH_FROM := $(or $(TORCH_INDEX_URL),pypi)
# The environment comes from the locks (every package, direct or not, at its version, each file
# checked against its sha256; `make lock` rewrites them from pyproject.toml): requirements.lock
# is the runtime (make venv, make demo), requirements-test.lock adds the [test] and [dev]
# extras (make venv-test: make test, make test-all, .ci/run).
# OFFLINE_WHEELS=<folder written by make wheelhouse>: install from that folder only, no index.
LOCK := requirements.lock
TEST_LOCK := requirements-test.lock
TORCH_LOCKED := $(if $(TORCH_INDEX_URL),$(and $(wildcard $(TORCH_LOCK)),$(wildcard $(TORCH_TEST_LOCK))))
UNLOCKED := $(if $(TORCH_INDEX_URL),$(if $(TORCH_LOCKED),,yes))
VENV_LOCK := $(if $(TORCH_INDEX_URL),$(if $(TORCH_LOCKED),$(TORCH_LOCK)),$(LOCK))
VENV_TEST_LOCK := $(if $(TORCH_INDEX_URL),$(if $(TORCH_LOCKED),$(TORCH_TEST_LOCK)),$(TEST_LOCK))
OFFLINE_WHEELS ?=
PIP_FROM = $(if $(OFFLINE_WHEELS),--no-index --find-links $(OFFLINE_WHEELS) ,$(TORCH_EXTRA))
TORCH_EXTRA = $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL) )
UNLOCKED_SAYS := make venv: no $(TORCH_LOCK) and $(TORCH_TEST_LOCK): torch/torchvision from $(TORCH_INDEX_URL), the rest resolved from pyproject.toml's pins, NOT hash-checked (make lock-torch writes the locks)

# Where the venv's torch comes from, rewritten only when it changes (so only a change rebuilds).
# A venv made before this record existed is taken as the default (PyPI) build.
$(VENV)/.torch-index: FORCE
	@mkdir -p $(VENV)
	@if [ ! -f $@ ] && [ -f $(VENV)/.installed ]; then echo pypi > $@ && touch -r $(VENV)/.installed $@; fi
	@echo '$(TORCH_FROM)' | cmp -s - $@ || echo '$(TORCH_FROM)' > $@

$(VENV)/.installed: pyproject.toml $(VENV_LOCK) $(VENV)/.torch-index
	$(if $(and $(UNLOCKED),$(OFFLINE_WHEELS)),$(error OFFLINE_WHEELS with TORCH_INDEX_URL needs $(TORCH_LOCK) and $(TORCH_TEST_LOCK) (make lock-torch, then make wheelhouse TORCH_INDEX_URL=...)))
	$(PYTHON) -m venv $(if $(filter $(VENV)/.torch-index,$?),--clear )$(VENV)
	$(if $(OFFLINE_WHEELS),,$(VENV)/bin/pip install --quiet --upgrade pip)
	$(if $(UNLOCKED),@echo "$(UNLOCKED_SAYS)")
	$(if $(UNLOCKED),$(VENV)/bin/pip install --quiet --index-url $(TORCH_INDEX_URL) $(TORCH_PINS))
	$(if $(UNLOCKED),$(VENV)/bin/pip install --quiet -e .,$(VENV)/bin/pip install --quiet $(PIP_FROM)-r $(VENV_LOCK))
	$(VENV)/bin/pip install --quiet $(if $(OFFLINE_WHEELS),--no-index --find-links $(OFFLINE_WHEELS) )--no-deps -e .
	echo '$(TORCH_FROM)' > $(VENV)/.torch-index
	touch $@

WITH_EXTRAS := '.[test,dev]'
$(VENV)/.installed-test: $(VENV)/.installed $(VENV_TEST_LOCK)
	$(if $(UNLOCKED),$(VENV)/bin/pip install --quiet -e $(WITH_EXTRAS),$(VENV)/bin/pip install --quiet $(PIP_FROM)-r $(VENV_TEST_LOCK))
	touch $@

# The locks from pyproject.toml (uv, from the [dev] extra): Linux x86_64, Python 3.11, every
# file's sha256 (PyPI's). The runtime lock is constrained by the test lock: one version each.
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28
lock: venv-test
	$(VENV)/bin/uv pip compile pyproject.toml --all-extras $(LOCK_FLAGS) -o $(TEST_LOCK)
	$(VENV)/bin/uv pip compile pyproject.toml -c $(TEST_LOCK) $(LOCK_FLAGS) -o $(LOCK)

# The locks of another torch build (TORCH_INDEX_URL=https://download.pytorch.org/whl/<backend>,
# e.g. cu126): torch and torchvision at pyproject.toml's versions, built for that backend, from
# PyTorch's index (uv's --torch-backend <backend> takes only PyTorch's own packages from there),
# the CUDA libraries that build requires (nvidia-*), every other package at the default test
# lock's version (TORCH_CONSTRAINTS: its pins without torch, torchvision, triton, nvidia-* and
# cuda-*), each file's sha256. Needs a machine that reaches the index; fails if the index has
# no build of the pinned versions (then try another backend: cu128, cu129).
TORCH_CONSTRAINTS := $(VENV)/torch-constraints.txt
TORCH_FAMILY := ^(torch|torchvision|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==
ifneq ($(filter lock-torch,$(MAKECMDGOALS)),)
ifeq ($(TORCH_INDEX_URL),)
$(error make lock-torch: set TORCH_INDEX_URL, e.g. https://download.pytorch.org/whl/cu126)
endif
endif
lock-torch: venv-test
	grep -E '^[A-Za-z0-9_.-]+==' $(TEST_LOCK) | sed 's/ .*//' | grep -v -E '$(TORCH_FAMILY)' > $(TORCH_CONSTRAINTS)
	$(VENV)/bin/uv pip compile pyproject.toml --all-extras -c $(TORCH_CONSTRAINTS) $(LOCK_FLAGS) --torch-backend $(TORCH_BACKEND) -o $(TORCH_TEST_LOCK)
	$(VENV)/bin/uv pip compile pyproject.toml -c $(TORCH_TEST_LOCK) $(LOCK_FLAGS) --torch-backend $(TORCH_BACKEND) -o $(TORCH_LOCK)

# Every file the test lock names (wheels; connection-pool 0.0.3 exists only as an sdist and is
# built at install time with the locked setuptools), downloaded and checked against the lock's
# sha256, for a machine without internet (same platform: Linux x86_64, Python 3.11):
#   make venv OFFLINE_WHEELS=wheelhouse     (or venv-test; pip's --no-index --find-links)
# With TORCH_INDEX_URL the files of that build's test lock (make lock-torch), from PyPI and the
# index; install them with the same TORCH_INDEX_URL and OFFLINE_WHEELS.
# WHEELHOUSE_LOCK=<a lock file> downloads that lock's files instead (tests/test_lock.py).
WHEELHOUSE ?= wheelhouse
WHEELHOUSE_LOCK ?= $(if $(TORCH_INDEX_URL),$(TORCH_TEST_LOCK),$(TEST_LOCK))
wheelhouse:
	@test -f $(WHEELHOUSE_LOCK) || { echo "make wheelhouse: no $(WHEELHOUSE_LOCK) (a build's locks: make lock-torch TORCH_INDEX_URL=..., on a machine that reaches the index)" >&2; exit 1; }
	rm -rf $(WHEELHOUSE).part
	$(PYTHON) -m pip download --quiet --no-deps --require-hashes $(TORCH_EXTRA)-r $(WHEELHOUSE_LOCK) -d $(WHEELHOUSE).part
	rm -rf $(WHEELHOUSE)
	mv $(WHEELHOUSE).part $(WHEELHOUSE)

FORCE:

.PHONY: venv venv-test lock lock-torch wheelhouse FORCE demo smoke test test-all test-paper-shapes dry-run-paper bench bench-gpu forecast float-paths readme-tables power
venv: $(VENV)/.installed
venv-test: $(VENV)/.installed-test

# --max-jobs-per-timespan 1000/60s: Snakemake's default (100/1s) re-runs its scheduler every
# second, re-evaluating the params of every ready job each time; on the demo that took 25-45%
# of one of the 2 cores (issue 16, measured 2026-12-01). Locally the limit never binds; a job
# that finishes still wakes the scheduler at once. --rerun-triggers: the profile's policy
# (profiles/slurm/config.yaml: an edited adapter script alone reruns nothing). Last, the HTML
# report of every table and figure the run built (results/report.html).
demo: venv
	$(VENV)/bin/snakemake all --configfile config/demo.yaml --cores $(CORES) --keep-going --rerun-incomplete --rerun-triggers mtime params input software-env --show-failed-logs --max-jobs-per-timespan 1000/60s --logger rich --set-threads train_model=1 autoattack=1 invert=1 measure_hsic=1 train_generator=1 train_evaluation_model=1 train_face_embedding=1 train_instrument_classifier=1 pretrain_backbone=1
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
