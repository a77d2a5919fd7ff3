"""A copy of the project's code that `tasks.core.code` reads instead of the real one, so a test can edit it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.core import source


@pytest.fixture
def project_copy(tmp_path, monkeypatch) -> Path:
    """`tasks.core.code` reading a tmp copy of the `tasks` and `flows` packages."""
    root = tmp_path / "project"
    for package in source.PROJECT_PACKAGES:
        shutil.copytree(source.ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(source, "ROOT", root)
    return root
