"""The installed Composer's version, recorded with every study, export and registered model."""

from __future__ import annotations

import importlib.metadata


def composer_version() -> str:
    try:
        return importlib.metadata.version("composer-rag")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
