# sinkflex-rl: two commands do everything on a fresh machine with Python 3.11+.
#   make reproduce [PROFILE=smoke|cpu|gpu]   run every notebook with Papermill
#   make test                                pytest + nbval (smoke profile)
#   make gpu-check                           every CUDA check, on a CUDA machine
#   make pretrain                            regenerate data/checkpoints/base-tiny (six stages, hours on 2 cores; resumable)
#   make pretrain-lists                      the lists recipe from the shipped base (three runs, ~70 min on 2 cores; not shipped)
#   make grpo-seeds [PROFILE=...]            GRPO from the base with seeds 0 1 2, mean and spread (resumable)
#   make lab                                 JupyterLab on notebooks/, with the project's venv as its kernel
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROFILE ?= cpu
STAMP  := $(VENV)/.sinkflex-installed

PRETRAIN_DIR ?= $(HOME)/sinkflex_runs/pretrain-base-tiny
PRETRAIN_THREADS ?= 2
SEEDS_DIR ?= $(HOME)/sinkflex_runs/grpo-seeds-$(PROFILE)

.PHONY: reproduce test gpu-check pretrain pretrain-stage1 pretrain-stage2 pretrain-stage3 pretrain-stage4 pretrain-stage5 pretrain-stage6 pretrain-lists grpo-seeds lab venv clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version' 
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

reproduce: $(STAMP)
	$(PY) -m sinkflex_lib.reproduce --profile $(PROFILE)

test: $(STAMP)
	SINKFLEX_PROFILE=smoke $(PY) -m pytest tests
	SINKFLEX_PROFILE=smoke $(PY) -m pytest --nbval-lax notebooks/

# Six stages (pretrain.py's "cpu", "episodes", "confirm", "names", "items" and "variants" profiles), each in a folder outside the
# repository (rerunning one resumes it exactly where it stopped). Each ships its result as the base (a
# finished stage that the base already holds is not shipped again); each later one starts from
# whatever base is shipped, so it can run in a later session even if the earlier folders are gone.
BASE := data/checkpoints/base-tiny
pretrain: $(STAMP)
	$(MAKE) pretrain-stage1
	$(MAKE) pretrain-stage2
	$(MAKE) pretrain-stage3
	$(MAKE) pretrain-stage4
	$(MAKE) pretrain-stage5
	$(MAKE) pretrain-stage6

pretrain-stage1: $(STAMP)
	$(PY) -m sinkflex_lib.rl.pretrain --out $(PRETRAIN_DIR) --threads $(PRETRAIN_THREADS) \
		$(if $(wildcard $(PRETRAIN_DIR)/checkpoint/state.json),--resume,) --ship $(BASE)

# A later stage: profile $(1), seed $(2), from the shipped base, in $(PRETRAIN_DIR)-$(1).
later_stage = $(PY) -m sinkflex_lib.rl.pretrain --profile $(1) --seed $(2) --init $(BASE) \
	--out $(PRETRAIN_DIR)-$(1) --threads $(PRETRAIN_THREADS) \
	$(if $(wildcard $(PRETRAIN_DIR)-$(1)/checkpoint/state.json),--resume,) --ship $(BASE)

pretrain-stage2: $(STAMP)
	$(call later_stage,episodes,1)

pretrain-stage3: $(STAMP)
	$(call later_stage,confirm,2)

pretrain-stage4: $(STAMP)
	$(call later_stage,names,3)

pretrain-stage5: $(STAMP)
	$(call later_stage,items,4)

pretrain-stage6: $(STAMP)
	$(call later_stage,variants,5)

# The lists recipe (not shipped; figures/grpo_stage6_base/README.md): list look-ups alone from the shipped
# base, then the `lists` profile twice, one seed of LISTS_SEEDS each, in $(LISTS_DIR)/{lookups,lists1,lists2}
# (each resumes where it stopped). The runs first measured (L9, L10) used seeds 9 and 10 after list_probe.py.
LISTS_DIR ?= $(HOME)/sinkflex_runs/lists-recipe
LISTS_SEEDS ?= 11 12 13
lists_stage = $(PY) -m sinkflex_lib.rl.pretrain --profile $(1) --seed $(2) --init $(3) --out $(LISTS_DIR)/$(4) \
	--threads $(PRETRAIN_THREADS) $(if $(wildcard $(LISTS_DIR)/$(4)/checkpoint/state.json),--resume,)
pretrain-lists: $(STAMP)
	$(call lists_stage,list-lookups,$(word 1,$(LISTS_SEEDS)),$(BASE),lookups)
	$(call lists_stage,lists,$(word 2,$(LISTS_SEEDS)),$(LISTS_DIR)/lookups,lists1)
	$(call lists_stage,lists,$(word 3,$(LISTS_SEEDS)),$(LISTS_DIR)/lists1,lists2)

# One GRPO run per seed in $(SEEDS_DIR)/seed_<S>, then $(SEEDS_DIR)/seeds.json (sinkflex_lib.rl.seeds).
grpo-seeds: $(STAMP)
	$(PY) -m sinkflex_lib.rl.seeds --profile $(PROFILE) --seeds 0 1 2 --out $(SEEDS_DIR) --resume

lab: $(STAMP)
	SINKFLEX_PROFILE=$(PROFILE) $(PY) -m jupyterlab --notebook-dir=notebooks

gpu-check: $(STAMP)
	$(PY) -m sinkflex_lib.gpu_check

clean-venv:
	rm -rf $(VENV)
