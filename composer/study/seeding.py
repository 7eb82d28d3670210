"""Per-trial seeding: trial ``n`` draws from a sampler built for ``n`` (seeded ``seed + n``).

For the samplers that draw at random (TPE, random, NSGA-II); never the grid sampler, whose seed orders
the grid that every trial's grid point is an index into (see ``study_sampler``).

Trial numbers are unique across every worker of a study, so workers started together propose different
configurations instead of the same ones in lockstep (one seed per process would), while one worker's
study stays reproducible from its seed, and a resumed study, numbering on, does not replay its proposals.
Imported lazily: it subclasses Optuna's sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optuna import Study
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState


class TrialSeededSampler(BaseSampler):
    """Delegates to ``make(trial.number)``; every sampler state Optuna needs lives in the storage."""

    def __init__(self, make: Callable[[int], BaseSampler]) -> None:
        self._make = make
        self.sampler = make(0)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.sampler = self._make(trial.number)
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
