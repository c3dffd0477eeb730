#!/bin/bash
# Scratch (sessions 39-41): the driver behind multi_world/*.json. Plays policies greedily on every task
# (335 each) of eval-world:2, 3 and 4, one `evaluate --json` file per policy and world in $MW_DIR.
#   mw_eval.sh THREADS NAME...        NAME: a GRPO run folder $RUNS/NAME, exported first to $RUNS/NAME_policy
#   mw_eval.sh THREADS LABEL=DIR...   DIR: a policy folder (a checkpoint, a soup), filed under LABEL
# then: python multi_world.py keep $MW_DIR (with LABEL or NAME in its GROUPS). A file already there is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-$HOME/sinkflex_runs}; MW_DIR=${MW_DIR:-$RUNS/mw}
export PYTHONPATH=$PWD TAU2_DATA_DIR=${TAU2_DATA_DIR:?set TAU2_DATA_DIR}
PY=${PY:-.venv/bin/python}
threads=$1; shift
mkdir -p "$MW_DIR"
for item in "$@"; do
  if [[ $item == *=* ]]; then label=${item%%=*}; policy=${item#*=}
  else label=$item; policy=$RUNS/${item}_policy
    [ -d "$policy" ] || $PY -m sinkflex_lib.rl.checkpoints "$RUNS/$item" "$policy"
  fi
  for w in 2 3 4; do
    f=$MW_DIR/${label}_w$w.json
    [ -s "$f" ] && continue
    $PY -m sinkflex_lib.rl.evaluate --policy "$policy" --world-seed $w --tasks 335 --max-turns 12 \
      --threads "$threads" --json > "$f.tmp" && mv "$f.tmp" "$f"
    echo "$label w$w $($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['mean_at_1'], d['write_mean_at_1'])" "$f")"
  done
done
