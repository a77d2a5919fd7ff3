# Two entry points: `make demo` (the whole DAG on the bundled captions, offline) and `make test`.
# Both create .venv from requirements.lock on first use.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
SHARED := $(abspath ../shared)
# NLTK tagger data: the copy in ../shared when present, else NLTK's own download into .nltk_data.
NLTK_DATA ?= $(if $(wildcard $(SHARED)/nltk_data),$(SHARED)/nltk_data,$(abspath .nltk_data))
export NLTK_DATA
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: demo test setup tools

$(BIN)/.installed: requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

$(NLTK_DATA):
	$(BIN)/python -m nltk.downloader -d $(NLTK_DATA) punkt_tab averaged_perceptron_tagger_eng wordnet

setup: $(BIN)/.installed | $(NLTK_DATA)

# One Prefect server for every stage (instead of a temporary one per stage process), stopped when dvc repro ends,
# however it ends; a server that does not come up fails the target with its reason.
demo: setup
	$(BIN)/cfgen with-server -- $(BIN)/dvc repro

# Debian's chromium (the gallery's browser tests) and strace (the syscall-level containment test), installed as a
# user would (apt-get; sudo when not root). Without one its tests skip, except under CI=true, where they fail.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
TOOLS := chromium strace
tools:
	@for tool in $(TOOLS); do command -v $$tool >/dev/null || { $(SUDO) apt-get install -y -qq $$tool >/dev/null \
	  || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$tool >/dev/null; } \
	  || echo "$$tool could not be installed: its tests will skip (or fail under CI=true)"; }; done

test: setup tools
	$(BIN)/pytest
