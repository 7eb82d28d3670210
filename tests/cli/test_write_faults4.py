"""Limits of the file system while writing our own files (issue 41): a file too large (EFBIG), no space
or quota left, a read-only mount are one line naming the file, exit 2, never a traceback."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from composer.cli.app import user_error_message
from composer.files import NoSpaceError, write_atomic

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"


def _small_files() -> None:
    """In the child: files past 1 KiB fail with EFBIG (SIGXFSZ ignored, as a shell's trap would)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


def test_a_file_too_large_for_the_file_system_is_one_line_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "report"
    command = [sys.executable, "-m", "composer", "eval", str(EXAMPLE / "questions.jsonl"),
               "--run", str(EXAMPLE / "bm25-run.jsonl"), "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=_small_files)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "OSError" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "file too large" in errors[0] and str(out) in errors[0], done.stderr
    assert not list(out.iterdir())  # nothing half-written, no temporary file left behind


@pytest.mark.parametrize(("code", "said"), [
    (errno.EROFS, "read-only file system"), (errno.EDQUOT, "disk quota exceeded"),
    (errno.ENOSPC, "no space left on device"), (errno.EFBIG, "file too large"),
])
def test_every_limit_of_the_file_system_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, said: str
) -> None:
    """Where the write fails (creating the temporary file, or writing it) it names the file to be."""
    target = tmp_path / "summary.json"

    def refused(path: Path, *, private: bool = False) -> tuple[int, str]:
        raise OSError(code, os.strerror(code), str(path.parent / ".summary.json.1234.tmp"))

    monkeypatch.setattr("composer.files.temporary_beside", refused)
    with pytest.raises(NoSpaceError) as raised:
        write_atomic(target, "{}")
    assert raised.value.reason.startswith(said) and not target.exists()
    assert user_error_message(raised.value) == f"{raised.value.reason} writing {target}"
    # An error from a write that names no file, wrapped by a library, is still one line.
    try:
        try:
            raise OSError(code, os.strerror(code))
        except OSError as inner:
            raise RuntimeError("store failed") from inner
    except RuntimeError as outer:
        message = user_error_message(outer)
    assert message is not None and message.startswith(said), message
