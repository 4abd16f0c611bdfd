# Two entry points, each self-installing on a fresh machine:
#   make demo   create .venv, install, search digits on embedded defaults, promote the winner
#   make test   create .venv, install, run the tests (all tiers: what CI runs)
# and for everyday work:
#   make check  the fast tier: no end-to-end, Ray, multi-node, browser, slow or
#               team-server test
#   make bench-smoke  every script in benchmarks/ with --smoke (CI's second
#               step, after make test)
#   make docs   the documentation site, built into site/ (strict: a warning
#               fails); make docs-serve serves it at 127.0.0.1:8000
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` and `make check`: each end-to-end test
# starts its own Ray and trains on 2 CPUs, so more workers than cores only
# add contention (tests/conftest.py gives each worker its share of torch's
# threads).
TEST_WORKERS ?= 2
# Each test file on one worker (a module's shared results are computed once),
# handed out in tests/conftest.py's order: the end-to-end files first.
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# Bytecode caches on, whatever the environment says: without them every
# process compiles tan_tune again and every pytest worker redoes the
# assertion rewriting of 100 test files (18 s of collection, 12 s with).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test check bench-smoke docs docs-serve install clean browser postgres

install: $(STAMP)

# torch comes from the registry (its CUDA build, which runs on CPU too):
# pyproject's torch>=2.14 keeps pip off the local CPU-only 2.13.0 wheel,
# which breaks torchvision and timm.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --editable '.[dev]'
	touch $(STAMP)

# A real search on the bundled digits (local Ray, Optuna, MLflow in sqlite),
# then its winner promoted to the reference batch on 2 Ray Train workers after
# a scaling-law calibration and registered in MLflow's Model Registry, then
# the same configuration audited on public data (`tan-tune audit`: eps_lb
# beside eps, nothing spent), then the version made the champion (its eps
# within 2) and the registry listed; last, how to load, serve and read its
# privacy card. Each demo gets its own directory and MLflow store,
# so its privacy ledger starts empty: in one store, a second full-budget run on
# the same digits would be refused. Run it again as often as you like.
DEMO_STORAGE := runs/demo-$(shell date +%Y%m%d-%H%M%S)
DEMO_MLFLOW := sqlite:///$(DEMO_STORAGE)/mlflow.db
demo: $(STAMP)
	mkdir -p $(DEMO_STORAGE)
	$(BIN)/tan-tune search search_spaces/digits-demo.yaml \
	  --storage $(DEMO_STORAGE) --tracking-uri $(DEMO_MLFLOW)
	$(BIN)/tan-tune promote $(DEMO_STORAGE)/digits-demo --calibrate --workers 2 \
	  --new-ledger --register digits-demo
	$(BIN)/tan-tune ledger --tracking-uri $(DEMO_MLFLOW)
	$(BIN)/tan-tune audit $(DEMO_STORAGE)/digits-demo \
	  --tracking-uri $(DEMO_MLFLOW) --storage $(DEMO_STORAGE)
	$(BIN)/tan-tune registry digits-demo --champion 1 --max-epsilon 2 \
	  --tracking-uri $(DEMO_MLFLOW)
	$(BIN)/tan-tune registry digits-demo --tracking-uri $(DEMO_MLFLOW)
	@echo "Inspect the search, the promoted run, the audit and the registered" \
	  "model: $(BIN)/mlflow ui --backend-store-uri $(DEMO_MLFLOW)," \
	  "then open the experiment link printed above"
	@echo "Next, the private model in production:"
	@echo "  load:  MLFLOW_TRACKING_URI=$(DEMO_MLFLOW) $(BIN)/python -c" \
	  "\"import mlflow, numpy; m = mlflow.pyfunc.load_model('models:/digits-demo@champion');" \
	  "print(m.predict(numpy.zeros((1, 1, 8, 8), 'float32')))\""
	@echo "  serve: PATH=$(BIN):\$$PATH MLFLOW_TRACKING_URI=$(DEMO_MLFLOW) mlflow models serve" \
	  "-m models:/digits-demo@champion --env-manager local --host 127.0.0.1 --port 5001"
	@echo "  card:  $(BIN)/tan-tune registry digits-demo --card 1 --tracking-uri $(DEMO_MLFLOW)"

# $(call apt_install,PROBE,PACKAGES,WHO): as root, install Debian's PACKAGES
# unless PROBE finds them (elsewhere WHO skips and says what to install).
define apt_install
	@if ! $(1) >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	    && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2) >/dev/null \
	  || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -q $(2) >/dev/null) \
	  || echo "make test: could not install $(2); $(3) will skip"; \
	fi
endef

# The browser test drives Debian's Chromium.
browser:
	$(call apt_install,command -v chromedriver,chromium chromium-driver,the browser test)

# The team tier (tests/team_server.py) runs a real PostgreSQL server.
postgres:
	$(call apt_install,ls /usr/lib/postgresql/*/bin/initdb,postgresql,the team tests)

# pytest exits 5 when it collects no test: with a suite this size that means
# collection broke, so it fails with a message rather than passing silently.
# --durations: the 15 slowest tests on every run, so growth shows.
test: $(STAMP) browser postgres
	$(BIN)/python -m pytest -q $(XDIST) \
	  -m "not benchmarks" --durations=15; status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no test" >&2; exit 1; fi; \
	exit $$status

check: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) \
	  -m "not (e2e or ray or multinode or browser or slow or benchmarks or team)"

bench-smoke: $(STAMP)
	$(BIN)/python -m pytest -q -m benchmarks tests/project/test_benchmarks_smoke.py

# MkDocs 1.6 prints a banner about its successors on every build; it says
# nothing of this site, so it is turned off.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

clean:
	rm -rf site $(VENV) *.egg-info .pytest_cache .hypothesis
