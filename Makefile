# Two commands set everything up on a fresh machine (Python 3.11, no GPU needed):
#   make demo   install into .venv, show ED examples, train and evaluate a tiny model (embedded sample)
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

.PHONY: install reinstall demo test clean browser

$(VENV)/.deps-installed: requirements.txt requirements-test.txt
	@echo "== install: a venv in $(VENV) (nothing is installed outside it, except chromium: see 'browser')"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	@echo "== install: $(if $(strip $(TORCH_SPEC)),$(TORCH_SPEC) and setuptools<81 first so that nothing later pulls another torch build (ParlAI imports pkg_resources),no torch: TORCH_SPEC is empty so yours is kept)"
	$(if $(strip $(TORCH_SPEC)),$(PIP) install --quiet "$(TORCH_SPEC)" "setuptools<81")
	@echo "== install: parlai==1.7.2 without its dependencies (its pins do not run on Python 3.11 / torch 2.13 / numpy 2)"
	$(PIP) install --quiet --no-deps parlai==1.7.2
	@echo "== install: requirements.txt (ParlAI's runtime + ours, each line says why) and requirements-test.txt (pytest, selenium)"
	$(PIP) install --quiet -r requirements.txt -r requirements-test.txt
	touch $@

# Our package is installed for real (not -e): its leaf modules must land in site-packages/parlai/.
reinstall: $(VENV)/.deps-installed
	flock /tmp/parlai-empathy-install.lock $(PIP) install --quiet --no-deps --no-build-isolation --force-reinstall .

install: reinstall

demo: install
	$(PARLAI) display_data -t empathy_ed_clean --ed-datapath sample -dt valid -n 3
	$(PARLAI) empathy_clean_report --ed-datapath sample
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(PARLAI) train_model -t empathy_ed_clean --ed-datapath sample -m transformer/generator \
	  -mf $(DEMO_DIR)/model --n-layers 1 --embedding-size 32 --ffn-size 64 --n-heads 2 \
	  -bs 16 --max-train-steps 30 -vstep 15 -vmt ppl -vmm min --skip-generation true \
	  --dict-maxtokens 3000 --truncate 64
	$(PARLAI) eval_model -t empathy_ed_clean --ed-datapath sample -mf $(DEMO_DIR)/model -dt test \
	  --inference greedy --skip-generation false -bs 16

# The human-evaluation browser test drives Debian's headless Chromium.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "== browser: installing Debian's chromium and chromium-driver (apt-get, as root) for tests/test_humaneval_browser.py"; \
	    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "== browser: chromium/chromedriver missing and not root: the browser test will be skipped (apt-get install chromium chromium-driver)"; fi; }

# -rs: every skipped test says why. CI (.ci/run) also sets PARLAI_EMPATHY_REQUIRE_BROWSER=1.
test: install browser
	$(PY) -m pytest -q -rs tests

clean:
	rm -rf build *.egg-info $(VENV)

# The GPU runbook's bundle (bench/gpu/README.md): ParlAI and the other wheels the GPU image lacks,
# ED and GoEmotions, all-MiniLM-L6-v2 in float16, GloVe 50d rows of ED's words; fails over 60 MiB.
.PHONY: gpu-bundle
gpu-bundle: $(VENV)/.deps-installed
	$(PY) bench/gpu/bundle.py --out .gpu
