#!/bin/bash
# session 48, at 81ded1a: the variants stage, 300 steps, seed 7, from the shipped base (4 layers)
# and from it grown to 6 layers (copies of the full-attention layers 1 and 3), one thread each.
cd /work/main
export TAU2_DATA_DIR=/work/shared/tau2/data PYTHONUNBUFFERED=1
R=~/sinkflex_runs/grow
.venv/bin/python -m sinkflex_lib.rl.pretrain --profile variants --init data/checkpoints/base-tiny --seed 7 --steps 300 --threads 1 --out $R/D4s7 > $R/D4s7.log 2>&1 &
.venv/bin/python -m sinkflex_lib.rl.pretrain --profile variants --init $R/base6 --seed 7 --steps 300 --threads 1 --out $R/D6s7 > $R/D6s7.log 2>&1 &
wait
touch $R/run.done
