"""What a registered model was registered with, so that loading can tell a model changed since.

Registration writes one more artifact, ``manifest.json``: the sha256 of every file of every other
artifact, and the endpoints (every ``api_base``, the Qdrant server's URL) and key variables (every
``api_key_env``) the model's files name. Its own sha256 is the model version's tag
``composer.manifest_sha256``, and the endpoints and variables are tags too, for people to read.

Why a manifest inside the model and its digest in the registry: a model version's tag holds at most a
few thousand characters, too few for an index's file list, while whoever can rewrite a model's files can
rewrite a manifest beside them, not the registry's tag. Loading verifies every file against the manifest
(a difference is refused, naming the file), the manifest against the tag wherever the registry is an
SQLite file Composer reads itself, and refuses an endpoint or key variable that differs from the
manifest's unless the user passes ``allow_modified`` (``--allow-modified-model``), which lets the config
files (``pipeline.json``, ``composer.json``) differ, never the index, shard or embedding model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from composer.errors import ComposerError, ConfigError
from composer.redact import scrub_url

ARTIFACT = "manifest"
FILE = "manifest.json"
FORMAT = "composer-model-manifest/v1"
DIGEST_TAG = "composer.manifest_sha256"
ENDPOINTS_TAG = "composer.endpoints"
KEY_ENV_TAG = "composer.key_env"
_CONFIGS = ("pipeline", "composer")
"""The model's config files, which ``allow_modified`` lets differ (its data files never may)."""


def sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_digests(artifacts: Mapping[str, str]) -> dict[str, str]:
    """``artifact/relative/path`` -> sha256 of every file of ``artifacts`` (name -> file or folder)."""
    out: dict[str, str] = {}
    for name, where in sorted(artifacts.items()):
        if name == ARTIFACT:
            continue
        root = Path(where)
        if root.is_file():
            out[name] = sha256(root)
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            out[f"{name}/{path.relative_to(root).as_posix()}"] = sha256(path)
    return out


def named(data: Any, key: str, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted field, value) of every string under ``key`` at any depth of ``data``."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            field = f"{prefix}{k}"
            if k == key and isinstance(v, str):
                yield field, v
            else:
                yield from named(v, key, f"{field}.")


def reach(config: Mapping[str, Any], server: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The endpoints and key variables a model's pipeline config and Qdrant reference name."""
    files = {"pipeline": config, "composer": {"qdrant": server}}
    urls = {v for data in files.values() for _, v in named(data, "api_base")}
    if server is not None and isinstance(server.get("url"), str):
        urls.add(server["url"])
    keys = {v for data in files.values() for _, v in named(data, "api_key_env")}
    return {"endpoints": sorted(urls), "key_env": sorted(keys)}


def write_manifest(dest: Path, artifacts: Mapping[str, str], config: Mapping[str, Any],
                   server: Mapping[str, Any] | None) -> str:
    """The manifest of ``artifacts`` written as ``dest``; its sha256 (the model version's tag)."""
    manifest = {"format": FORMAT, **reach(config, server), "files": file_digests(artifacts)}
    dest.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    return sha256(dest)


def verify(artifacts: Mapping[str, str], config: Mapping[str, Any], server: Mapping[str, Any] | None,
           *, expected: str | None, allow_modified: bool = False) -> None:
    """Refuse a model whose files differ from its manifest, whose manifest differs from the registry's
    tag (``expected``, when known), or (unless ``allow_modified``) whose endpoints or key variables differ
    from the manifest's. A model registered before manifests has nothing to check against unless the
    registry says it has one."""
    where = artifacts.get(ARTIFACT)
    if where is None:
        if expected is not None:
            raise ComposerError(f"the model registered with a manifest has none now: its files were "
                                f"changed since ({Path(artifacts['pipeline']).parent})")
        return
    path = Path(where)
    if expected is not None and sha256(path) != expected:
        raise ComposerError(f"{path} differs from the manifest registered with the model (tag {DIGEST_TAG})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        recorded = dict(manifest["files"])
        registered = {"endpoints": list(manifest["endpoints"]), "key_env": list(manifest["key_env"])}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ComposerError(f"{path} is not a model manifest ({type(exc).__name__})") from None
    now = reach(config, server)
    for what in ("endpoints", "key_env"):
        if now[what] != registered[what] and not allow_modified:
            shown = [scrub_url(v) for v in now[what]], [scrub_url(v) for v in registered[what]]
            raise ConfigError(f"the model names {what.replace('_', ' ')} {shown[0]}, not those it was "
                              f"registered with {shown[1]}: add --allow-modified-model to load it anyway",
                              path=path, field=what)
    found = file_digests(artifacts)
    for name in sorted(set(recorded) | set(found)):
        if allow_modified and name in _CONFIGS:
            continue
        if recorded.get(name) != found.get(name):
            state = "is missing" if name not in found else "was added" if name not in recorded else "differs"
            raise ComposerError(f"the model's file {_local(artifacts, name)} {state} since it was registered "
                                f"(manifest {path})")


def _local(artifacts: Mapping[str, str], name: str) -> str:
    """The local path of the manifest's ``artifact/relative/path``."""
    artifact, _, rest = name.partition("/")
    base = artifacts.get(artifact)
    return str(Path(base) / rest) if base and rest else base or name
