#!/usr/bin/env bash
# examples/gpt_wikitext.cpp on the bundled WikiText sample, two workers through `dtrain launch`: as a
# two-stage pipeline (the tied weight copied to the last stage) and under zero stage 3; each run's
# test perplexity falls below half the untrained model's.
#   tests/examples/gpt_wikitext_test.sh PROGRAM
set -euo pipefail
app=$(readlink -f "${1:?the example_gpt_wikitext program}")
dtrain=$(readlink -f "$(dirname "$app")/../bin/dtrain")
root=$(readlink -f "$(dirname "$0")/../data/wikitext_sample")
work=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-gpt-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
for strategy in pipeline zero; do
  "$dtrain" launch --nproc-per-node 2 --threads 1 -- "$app" "$root" "$strategy" >"$strategy.out" 2>"$strategy.err" || {
    cat "$strategy.err"
    echo "FAIL: example_gpt_wikitext $strategy failed" >&2
    exit 1
  }
  results=$(ls -d runs/*/results.json | tail -n 1)
  python3 - "$results" "$strategy" <<'PY'
import json, os, sys
results = json.load(open(sys.argv[1]))
assert results["strategy"] == sys.argv[2], results["strategy"]
ppl = [json.loads(line)["val/perplexity"] for line in open(os.path.join(os.path.dirname(sys.argv[1]), "metrics.jsonl"))
       if "val/perplexity" in json.loads(line)]
print(f"{sys.argv[2]}: test perplexity {ppl[0]:.1f} -> {ppl[-1]:.1f}")
sys.exit(0 if len(ppl) >= 2 and ppl[-1] < 0.5 * ppl[0] else 1)
PY
  rm -rf runs
done
