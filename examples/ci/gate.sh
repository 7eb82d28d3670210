#!/usr/bin/env bash
# CI gate: score the pipeline NEW against BASELINE on the same questions; exit 1 when NEW is significantly
# worse (the 95% paired bootstrap CI of new - baseline lies below 0) or worse by more than $MARGIN, 0 when
# it passes, 2 on bad input. The verdict is printed as a table and saved in $OUT/summary.json ("gate").
#
#   examples/ci/gate.sh NEW.yaml BASELINE
#
# BASELINE: the pipeline YAML it replaces, or the folder an earlier `composer eval --out` wrote.
# Environment (defaults: the bundled ARCD sample, offline): QUESTIONS, CORPUS, METRIC (composite, or a
# metric such as ndcg@10), MARGIN (0), OUT (gate-report), WORKDIR (.composer: cache it between runs),
# COMPOSER (the composer command).
set -euo pipefail

if [ "$#" -ne 2 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
sample="$(cd "$(dirname "$0")/../arcd-sample" && pwd)"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" LITELLM_LOCAL_MODEL_COST_MAP="${LITELLM_LOCAL_MODEL_COST_MAP:-True}"

exec ${COMPOSER:-composer} eval "${QUESTIONS:-$sample/questions.jsonl}" \
  --corpus "${CORPUS:-$sample/corpus.jsonl}" \
  --config "$1" --baseline "$2" \
  --metric "${METRIC:-composite}" --margin "${MARGIN:-0}" \
  --workdir "${WORKDIR:-.composer}" --out "${OUT:-gate-report}"
