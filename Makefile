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

.PHONY: demo test setup tools labelstudio remote database

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

# Debian packages the tests use, as package:program: chromium (the gallery's browser tests), strace (the
# syscall-level containment test), PostgreSQL 15 (the Prefect server on PostgreSQL; Debian keeps its programs off
# PATH), installed as a user would (apt-get; sudo when not root). Without one its tests skip, except under CI=true.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
TOOLS := chromium:chromium strace:strace postgresql-15:/usr/lib/postgresql/15/bin/initdb
tools:
	@for tool in $(TOOLS); do package=$${tool%%:*}; command -v $${tool#*:} >/dev/null \
	  || { $(SUDO) apt-get install -y -qq $$package >/dev/null \
	  || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$package >/dev/null; } \
	  || echo "$$package could not be installed: its tests will skip (or fail under CI=true)"; }; done

# Local stand-ins for a team's services (README "Sharing results"), on loopback until Ctrl-C: a DVC remote over
# WebDAV, and a throw-away PostgreSQL cluster for a Prefect server (in /tmp: as root it runs as `postgres`).
REMOTE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cfgen/dvc-remote
DATABASE_DIR ?= /tmp/cfgen-postgres-$(shell id -un)
remote: setup
	$(BIN)/python -m flows.services remote $(REMOTE_DIR)
database: setup tools
	$(BIN)/python -m flows.services database $(DATABASE_DIR)

# Label Studio's own venv (its pins clash with ours), once per content of requirements-labelstudio.lock, in the user's
# cache outside the clone: after it the suite needs no network. Without it its test skips, except under CI=true.
labelstudio: setup
	@$(BIN)/python -m flows.services labelstudio >/dev/null || echo "its test will skip (or fail under CI=true)"

test: setup tools labelstudio
	$(BIN)/pytest
