"""Samplers and pruners of a study: the configured Optuna ones, seeded per trial, and a grid that knows
a search space's conditions.

Per-trial seeding: a trial draws from a sampler seeded ``seed + place``, ``place`` being the number of
trials before it (those cut off by a dead process left out), for the samplers that draw at random (TPE,
random, NSGA-II). Workers started together take different places, so they propose different
configurations instead of the same ones in lockstep; one worker's study stays reproducible from its seed,
a resumed study does not replay its proposals, and a study killed and resumed any number of times
proposes what the uninterrupted one did.

The grid: Optuna's GridSampler takes the Cartesian product of every axis, so a conditional space (RRF's
k only for hybrid RRF, a convex weight only for convex fusion) multiplies into duplicates. Here the grid
is the list of configurations the space's conditions allow, each once: AutoRAG's 485-configuration space
is 484 trials, not 3 x 2 x 3 x 77 x 4 x 101. Imported lazily: it subclasses Optuna's samplers.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna import Study
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from composer.errors import ConfigError
from composer.record import TrialRecord
from composer.study import _optuna
from composer.study._workers import WORKER_ATTR, retried_numbers, tag_trial, worker_id
from composer.study.experiment import ExperimentConfig, PrunerConfig
from composer.study.fate import GRID_ID, failure_of
from composer.study.space import SearchSpace


def make_sampler(exp: ExperimentConfig, space: SearchSpace, seed_offset: int) -> BaseSampler:
    """The configured sampler, seeded ``seed + seed_offset``; a study seeds one per trial (``study_sampler``).

    The grid sampler alone keeps ``seed``: its seed orders the grid, one order for the whole study.
    """
    cfg = exp.sampler
    name = cfg.name
    if name == "auto":
        name = "nsga2" if exp.multi_objective else "tpe"
    options = cfg.options
    try:
        if name == "grid":
            if options:
                raise TypeError(f"unexpected option(s) {sorted(options)}")
            return ConditionalGridSampler(space.grid(), seed=cfg.seed)
        seed = None if cfg.seed is None else cfg.seed + seed_offset
        cls = {
            "tpe": optuna.samplers.TPESampler,
            "random": optuna.samplers.RandomSampler,
            "nsga2": optuna.samplers.NSGAIISampler,
        }[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(seed=seed, **options)
    except TypeError as exc:
        raise ConfigError(f"bad option for the {name} sampler: {exc}", field="sampler") from None


def study_sampler(exp: ExperimentConfig, space: SearchSpace) -> BaseSampler:
    """The study's sampler: tags each trial with its worker, and is seeded per trial when it draws at
    random and has a seed. The grid needs no per-trial seed: it hands each trial, whichever worker asks,
    a point no trial has taken yet."""
    if exp.sampler.seed is None or exp.sampler.name == "grid":
        fixed = make_sampler(exp, space, 0)
        return StudySampler(lambda _: fixed, per_trial=False)
    return StudySampler(lambda place: make_sampler(exp, space, place), per_trial=True)


def place_in_study(study: Study, number: int) -> int:
    """How many trials came before trial ``number``, leaving out the surplus of racing workers and those
    cut off by a dead process and run again (their retry takes their place) or cut off while their
    parameters were drawn (the next trial draws them anew): a study killed and resumed seeds each trial
    as the run that was never interrupted did, so it proposes the same configurations. A trial cut off
    too often to be run again keeps its place, so its configuration (one that kills its process, say) is
    not proposed anew."""
    trials = _optuna.trials_at_start(study, number)
    retried = retried_numbers(trials)

    def takes_place(t: FrozenTrial) -> bool:
        kind = failure_of(t)
        if kind == "lost":
            return t.number not in retried and TrialRecord.of(t) is not None
        return kind != "surplus"

    return sum(1 for t in trials if t.number < number and takes_place(t))


def make_pruner(cfg: PrunerConfig) -> optuna.pruners.BasePruner:
    """The configured pruner; the median pruner waits for 3 trials and prunes from the second batch on."""
    defaults: dict[str, dict[str, Any]] = {
        "median": {"n_startup_trials": 3, "n_warmup_steps": 1},
        "percentile": {"percentile": 25.0, "n_startup_trials": 3, "n_warmup_steps": 1},
    }
    options = {**defaults.get(cfg.name, {}), **cfg.options}
    cls = {
        "median": optuna.pruners.MedianPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "none": optuna.pruners.NopPruner,
    }[cfg.name]
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad option for the {cfg.name} pruner: {exc}", field="pruner") from None


class StudySampler(BaseSampler):
    """Delegates to ``make(place)``, ``place`` being the trial's ``place_in_study`` when ``per_trial``
    (every sampler state Optuna needs lives in the storage), and tags each new trial with its worker."""

    def __init__(self, make: Callable[[int], BaseSampler], *, per_trial: bool) -> None:
        self._make = make
        self._per_trial = per_trial
        self.sampler = make(0)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        tag_trial(study, trial)
        if self._per_trial:
            self.sampler = self._make(place_in_study(study, trial.number))
        self.sampler.before_trial(study, trial)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()


class ConditionalGridSampler(BaseSampler):
    """Each trial takes the next configuration of ``points`` no trial has taken (one finished, failed or
    running holds it), in an order shuffled by ``seed``; once every point is taken the study stops.

    Workers asking at the same instant may take the same point: the second then waits for the first and
    answers from its result (``composer.study._workers.wait_for_twin``).
    """

    def __init__(self, points: Sequence[dict[str, Any]], seed: int | None = None) -> None:
        self.points = list(points)
        self.order = list(range(len(self.points)))
        if seed is not None:
            random.Random(seed).shuffle(self.order)
        self._assigned: dict[int, int] = {}
        """Trial number -> the point this process gave it: each parameter's draw would otherwise read the
        trial's system attributes back from the storage (~7 ms a trial)."""

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        known = trial.system_attrs.get(GRID_ID)
        if known is not None:
            self._assigned[trial.number] = known
            return
        fixed = trial.system_attrs.get("fixed_params")
        if fixed is not None:  # a retry of a trial whose process died: the same point again
            grid_id = next((i for i, p in enumerate(self.points) if p == fixed), None)
        else:
            taken = self._taken(_optuna.trials_at_start(study, trial.number))
            grid_id = next((i for i in self.order if i not in taken), None)
            if grid_id is None:
                study.stop()
                grid_id = self.order[-1] if self.order else None
        if grid_id is not None:
            _optuna.set_system_attr(study, trial, GRID_ID, grid_id)
            self._assigned[trial.number] = grid_id

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        """Stop once every point is taken; read only when the study may hold as many trials as points (a
        read a trial, ~4 ms at 500 trials, otherwise). Another worker's trials that fill the grid first
        are found by the next ``before_trial``, which stops the study then."""
        if trial.number + 1 >= len(self.points) and len(self._taken(_optuna.all_trials(study))) >= len(
            self.points
        ):
            study.stop()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        grid_id = self._assigned.get(trial.number)
        if grid_id is None:
            grid_id = trial.system_attrs.get(GRID_ID)
        if grid_id is None or param_name not in self.points[grid_id]:
            raise ConfigError(
                f"the grid has no value for {param_name!r} in this configuration",
                field=f"dimensions.{param_name}",
            )
        return self.points[grid_id][param_name]

    def _taken(self, trials: Sequence[FrozenTrial]) -> set[int]:
        """Points finished, running or queued, and failed points no run should try again: an invalid
        combination, a trial cut off too often to be run again, and one whose pipeline failed in this
        process (a later run, the cause fixed, tries it again: the stop rules end a run that fails on)."""
        retried = retried_numbers(trials)
        me = worker_id()

        def holds(t: FrozenTrial) -> bool:
            kind = failure_of(t)
            if kind is None:
                return True
            if kind == "lost":
                return t.number not in retried
            return kind == "invalid" or (kind == "error" and t.system_attrs.get(WORKER_ATTR) == me)

        return {t.system_attrs[GRID_ID] for t in trials if GRID_ID in t.system_attrs and holds(t)}


PIN_ATTR = "composer.pin"
"""Trial system attribute: the index of the stage-1 configuration a staged study's stage-2 trial runs on."""


class PinnedSampler(BaseSampler):
    """Stage 2 of a staged study (``composer.study.staged``): each trial runs on one of ``pins`` (stage 1's
    best retrieval configurations, as parameters), the one the fewest trials have run on so far (the best
    first on a tie), and ``base`` samples every other parameter. Pinned parameters are kept out of the
    relative search space, so no multivariate sampler proposes a retrieval configuration of its own."""

    def __init__(self, base: BaseSampler, pins: Sequence[dict[str, Any]]) -> None:
        self.base = base
        self.pins = [dict(p) for p in pins]
        self.keys = frozenset(k for p in self.pins for k in p)
        self._assigned: dict[int, int] = {}

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        pin = trial.system_attrs.get(PIN_ATTR)
        if pin is None:
            taken = [t.system_attrs.get(PIN_ATTR) for t in _optuna.trials_at_start(study, trial.number)]
            pin = min(range(len(self.pins)), key=lambda i: (taken.count(i), i))
            _optuna.set_system_attr(study, trial, PIN_ATTR, pin)
        self._assigned[trial.number] = pin

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        space = self.base.infer_relative_search_space(study, trial)
        return {name: dist for name, dist in space.items() if name not in self.keys}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        pin = self.pins[self._assigned.get(trial.number, trial.system_attrs.get(PIN_ATTR, 0))]
        if param_name in pin:
            return pin[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
