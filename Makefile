# sinkflex-rl: two commands do everything on a fresh machine with Python 3.11+.
#   make reproduce [PROFILE=smoke|cpu|gpu]   run every notebook with Papermill
#   make test                                pytest + nbval (smoke profile)
#   make gpu-check                           every CUDA check, on a CUDA machine
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROFILE ?= cpu
STAMP  := $(VENV)/.sinkflex-installed

.PHONY: reproduce test gpu-check venv clean-venv

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

gpu-check: $(STAMP)
	$(PY) -m sinkflex_lib.gpu_check

clean-venv:
	rm -rf $(VENV)
