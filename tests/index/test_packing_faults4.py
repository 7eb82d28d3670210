"""Issue 41: a damaged or hostile packed shard is one ComposerError, checked whole before anything is
unpacked (names, extents, a blob byte used twice, a size cap)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from composer.errors import ComposerError
from composer.index.packing import BLOB, MANIFEST, MAX_UNPACK_ENV, pack_folder, unpack_folder


@pytest.fixture()
def pack(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a.bin").write_bytes(b"a" * 5000)
    (source / "b.json").write_bytes(b'{"x": 1}')
    pack_folder(source, tmp_path / "pack")
    return tmp_path / "pack"


def _manifest(pack: Path) -> dict[str, Any]:
    return dict(json.loads((pack / MANIFEST).read_text(encoding="utf-8")))


def _refused(pack: Path, dest: Path, match: str) -> None:
    with pytest.raises(ComposerError, match=match):
        unpack_folder(pack, dest)
    assert not dest.exists()  # nothing half-written


def test_a_truncated_blob_is_refused_before_writing(pack: Path, tmp_path: Path) -> None:
    (pack / BLOB).write_bytes((pack / BLOB).read_bytes()[:100])
    _refused(pack, tmp_path / "copy", "ends early")


def test_a_garbage_manifest_is_one_error(pack: Path, tmp_path: Path) -> None:
    (pack / MANIFEST).write_text('{"format": "composer-packed-folder/v1", "files": [', encoding="utf-8")
    _refused(pack, tmp_path / "copy", "JSONDecodeError")
    listing = {"format": "composer-packed-folder/v1", "dirs": [], "files": [{"path": 1}]}
    (pack / MANIFEST).write_text(json.dumps(listing), encoding="utf-8")
    _refused(pack, tmp_path / "copy", "does not list files")


def test_extents_sharing_the_blob_are_refused(pack: Path, tmp_path: Path) -> None:
    """A small manifest pointing many extents at one blob would unpack to gigabytes."""
    manifest = _manifest(pack)
    entry = manifest["files"][0]
    manifest["files"] = [{**entry, "path": f"copy-{i}", "size": entry["size"]} for i in range(50)]
    (pack / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _refused(pack, tmp_path / "copy", "overlap")


def test_the_declared_size_is_capped(pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _manifest(pack)
    manifest["files"].append({"path": "huge", "size": 1 << 50, "extents": []})
    (pack / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _refused(pack, tmp_path / "copy", MAX_UNPACK_ENV)
    monkeypatch.setenv(MAX_UNPACK_ENV, "1000")  # a lower cap refuses the honest 5 KB pack too
    manifest["files"].pop()
    (pack / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _refused(pack, tmp_path / "copy", "more than the 1000 allowed")


@pytest.mark.parametrize("name", ["/tmp/evil", "../evil", "sub/../../evil"])
def test_a_name_leaving_the_folder_creates_nothing(pack: Path, tmp_path: Path, name: str) -> None:
    manifest = _manifest(pack)
    manifest["dirs"] = [*manifest["dirs"], "early"]
    manifest["files"].append({"path": name, "size": 0, "extents": []})
    (pack / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _refused(pack, tmp_path / "copy", "leaves its folder")


def test_an_extent_past_its_file_is_refused(pack: Path, tmp_path: Path) -> None:
    manifest = _manifest(pack)
    entry = next(e for e in manifest["files"] if e["path"] == "sub/a.bin")
    entry["size"] = 10  # its 5000 bytes would be written past the end it declares
    (pack / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    _refused(pack, tmp_path / "copy", "past its size")


def test_an_honest_pack_still_unpacks(pack: Path, tmp_path: Path) -> None:
    unpack_folder(pack, tmp_path / "copy")
    assert (tmp_path / "copy" / "sub" / "a.bin").read_bytes() == b"a" * 5000
