"""`composer --version`, and `export --promote` refusing the held-out loser without `--force` (issue 42,
points 9 and 11), before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_new_user import _exported_study
from typer.testing import CliRunner

from composer.cli.app import app
from composer.version import composer_version


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_package_version(flag: str) -> None:
    result = CliRunner().invoke(app, [flag])
    assert result.exit_code == 0, result.output
    assert result.output == f"composer {composer_version()}\n"
    assert composer_version() != "unknown"  # the package is installed: its metadata has the version


def test_promote_refuses_the_held_out_loser_before_writing_anything(tmp_path: Path) -> None:
    url, out, _ = _exported_study(tmp_path, runner_up_better=True)
    result = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out),
                                      "--register", "m", "--promote"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: field 'promote': not promoting #0: on the 47 held-out questions the runner-up #1 is really "
        "better than the winner #0 (difference -0.1000, 95% CI [-0.1500, -0.0500]); register the runner-up "
        "with --trial 1 --promote, or add --force to promote #0 anyway"]
    assert not out.exists()


def test_the_held_out_winner_or_force_passes_the_promotion_check(tmp_path: Path) -> None:
    url, out, _ = _exported_study(tmp_path, runner_up_better=True)
    base = ["export", "hand", "--storage", url, "--out", str(out), "--register", "m", "--promote"]
    for extra in (["--trial", "1"], ["--force"]):  # past the held-out check: on to the next one
        result = CliRunner().invoke(app, [*base, *extra])
        assert result.exit_code == 2 and "--register needs --experiment" in result.output, result.output
        assert not out.exists()
    held = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out), "--force"])
    assert held.exit_code == 2 and "add --promote" in held.output


def test_promote_goes_on_when_the_held_out_winner_holds(tmp_path: Path) -> None:
    url, out, _ = _exported_study(tmp_path, runner_up_better=False)
    result = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out), "--register",
                                      "m", "--promote"])
    assert result.exit_code == 2 and "--register needs --experiment" in result.output, result.output


def test_register_winner_refuses_the_held_out_loser_from_python(tmp_path: Path) -> None:
    """`StudyResult.register(name, promote=True)` goes through `register_winner`: the same refusal,
    before MLflow is touched (the store named here does not exist)."""
    import optuna

    from composer.errors import InputError
    from composer.study.registry import Where, register_winner

    url, _, _ = _exported_study(tmp_path, runner_up_better=True)
    study = optuna.load_study(study_name="hand", storage=url)
    winner = study.get_trials()[0]
    where = Where(url, f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}", tmp_path)
    with pytest.raises(InputError, match=r"not promoting #0: .* runner-up #1 is really better"):
        register_winner(study, winner, where, "m", promote=True)
    assert not (tmp_path / "absent").exists()
