PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# The CPU build of torch first, or pip pulls a multi-GB CUDA build for sentence-transformers.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/composer eval examples/arcd-sample/questions.jsonl --corpus examples/arcd-sample/corpus.jsonl \
		--run examples/arcd-sample/bm25-run.jsonl --k 1 3 5 10

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check composer tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
