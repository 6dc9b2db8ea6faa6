# Two commands a new user needs:
#   make run    executes every notebook with papermill into runs/<timestamp>-<profile>/
#   make test   runs the tests (CI's .ci/run calls exactly this)
# Both create the environment on first use. On a GPU machine: make run PROFILE=gpu-llama
PROFILE ?= cpu-coder
KIND := $(if $(filter gpu-%,$(PROFILE)),gpu,cpu)
WITH_ENV := bash scripts/with_env.sh $(KIND)
NOTEBOOKS ?=
SET ?=
PYTEST_ARGS ?=
# two pytest workers, each pinned to half the cores (tests/conftest.py): engine starts overlap
TEST_WORKERS ?= -n 2 --dist loadgroup
RUN_ARGS = $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS)) $(foreach p,$(SET),--set $(p))

.PHONY: run test test-fast smoke worth-it lab env help preflight demo reference compare rules
help:
	@echo "make run [PROFILE=cpu-coder|cpu-tiny|gpu-llama|gpu-qwen3] [NOTEBOOKS='00 01']  execute the series"
	@echo "make test [PYTEST_ARGS=...]   run all three test tiers (real vLLM on the CPU, two pinned workers; 45-50 min on 2 cores)"
	@echo "make test-fast                 the unit tier only (tests/unit: no server, about 1.5 min); run it while you work"
	@echo "make smoke                     execute the series with the small test parameters"
	@echo "make preflight [SMOKE=1]       check prompts, memory and models of PROFILE before any server starts"
	@echo "make worth-it PROMPTS=f.jsonl  notebook 07 (the verdict) on your own prompts"
	@echo "make demo [PROFILE=...]        the live side-by-side demo as a page (Voila on 127.0.0.1; prints the URL)"
	@echo "make reference RUN=runs/<dir>  data/reference/<profile>[-<cpu class>].json (\"what you should see\") from a run"
	@echo "make compare RUNS='runs/a runs/b'  two runs side by side: 04's best k and 05's intervals, do they agree?"
	@echo "make rules                     specdec_helpers/costmodel/rules.py from the notebooks' #@save cells (after editing a rule)"
	@echo "make lab                       JupyterLab in the project's environment: one run folder, shared servers"
	@echo "make env                       only create the environment"

run:
	$(WITH_ENV) python -m tools.run_series --profile $(PROFILE) $(RUN_ARGS)

smoke:
	$(WITH_ENV) python -m tools.run_series --profile $(PROFILE) --smoke $(RUN_ARGS)

preflight:
	$(WITH_ENV) python -m tools.preflight --profile $(PROFILE) $(if $(SMOKE),--smoke) $(foreach p,$(SET),--set $(p))

worth-it:
	@test -n "$(PROMPTS)" || { echo "usage: make worth-it PROMPTS=my_prompts.jsonl [PROFILE=...] [SET=\"prompts_per_class=12\"]"; exit 2; }
	$(WITH_ENV) python -m tools.run_series --profile $(PROFILE) --notebooks 07 --set prompts_file=$(abspath $(PROMPTS)) $(foreach p,$(SET),--set $(p))

test:
	bash scripts/ensure_browser.sh
	$(WITH_ENV) python -m pytest $(TEST_WORKERS) $(PYTEST_ARGS)

test-fast:
	$(WITH_ENV) python -m pytest $(TEST_WORKERS) -m "not engine" $(PYTEST_ARGS) tests/unit

demo:
	$(WITH_ENV) python -m tools.demo_page $(if $(filter command line environment,$(origin PROFILE)),--profile $(PROFILE)) $(foreach p,$(SET),--set $(p))

reference:
	@test -n "$(RUN)" || { echo "usage: make reference RUN=runs/<timestamp>-<profile> [PROFILE=...]"; exit 2; }
	$(WITH_ENV) python -m tools.build_reference $(RUN) $(if $(filter command line,$(origin PROFILE)),--profile $(PROFILE))

compare:
	@test -n "$(RUNS)" || { echo "usage: make compare RUNS=\"runs/<first> runs/<second>\""; exit 2; }
	$(WITH_ENV) python -m tools.compare_runs $(RUNS)

rules:
	$(WITH_ENV) python -m tools.export_rules

lab:
	$(WITH_ENV) python -m tools.lab $(LAB_ARGS)

env:
	$(WITH_ENV) python -c "import sys; print('environment ready:', sys.prefix)"
