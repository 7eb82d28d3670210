"""Shared test set-up: offline by construction, and the datasets in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Set before any test module imports huggingface_hub, transformers or litellm: they read these at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared datasets, next to the repository (../shared/data)."""
    path = REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.fixture(scope="session")
def arcd_dir(shared_data: Path) -> Path:
    return shared_data / "arcd"


@pytest.fixture(scope="session")
def persianqa_dir(shared_data: Path) -> Path:
    return shared_data / "persianqa"
