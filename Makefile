PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint docs bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The CPU build of torch first, or pip pulls a multi-GB CUDA build for sentence-transformers.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Offline by construction: no model hub, no price-map download.
OFFLINE := HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
DEMO := experiments/arabic-demo.yaml

# A short study on the bundled Arabic sample (run it again: the study continues, nothing is re-run),
# the winner exported as a pipeline config, and the leaderboard.
demo: $(STAMP)
	$(OFFLINE) $(BIN)/composer optimize $(DEMO)
	$(OFFLINE) $(BIN)/composer export arabic-demo -e $(DEMO) --out .composer/best.yaml
	cat .composer/best.yaml
	$(OFFLINE) $(BIN)/composer trials arabic-demo -e $(DEMO)

# pytest exits 5 when it collects no test: make fails on it like on any failure. Two processes (the
# machines have two cores); a file's tests stay on one, so its module fixtures are built once.
# Every test, as CI runs it; the 15 slowest are printed so a new slow test shows.
test: $(STAMP)
	$(OFFLINE) $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

# The inner loop: everything but the tests marked slow (whole studies, drills, parity on full ARCD).
test-fast: $(STAMP)
	$(OFFLINE) $(BIN)/python -m pytest -q -m "not slow" -n 2 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check composer tests benchmarks examples tools
	$(BIN)/mypy

# The documentation site under site/ (mkdocs-material; the CLI and file references are generated from the
# code). --strict: a broken link or anchor, or a page left out of the navigation, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
