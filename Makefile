# The two commands a new user types are `make run` and `make test`; both build
# .venv with Python 3.10 and the pinned stack (constraints.txt) on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.leantfx-installed
PYTEST_ARGS ?=
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: venv run test test-unit test-e2e bench constraints clean

venv: $(STAMP)

$(STAMP): setup.py pyproject.toml constraints.txt
	@py="$$(tools/find_python310.sh)" || exit 1; \
	if [ ! -x $(PY) ]; then echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; fi; \
	$(PY) -m pip install --quiet --disable-pip-version-check "pip==24.2" && \
	echo "installing leantfx and its pinned stack into $(VENV) (about 2 minutes the first time)" && \
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,bench,runtimes]' && \
	cp leantfx/leantfx-keras2.pth "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/" && \
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/leantfx run $(RUN_ARGS)

# Two pytest-xdist workers, one test file at a time each (module fixtures such
# as a shared pipeline run stay in one process), handed out in collection
# order: tests/conftest.py collects the slow files first, longest first; the
# slowest tests are listed.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(PY) -m pytest -q -m unit $(PYTEST_ARGS)

test-e2e: $(STAMP)
	$(PY) -m pytest -q -m e2e $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.run_all $(BENCH_ARGS)

# Re-resolves the stack in a scratch venv and rewrites constraints.txt,
# keeping its comment header (which explains the held versions).
constraints:
	@py="$$(tools/find_python310.sh)" || exit 1; rm -rf .venv-resolve && \
	"$$py" -m venv .venv-resolve && .venv-resolve/bin/pip install -q "pip==24.2" && \
	.venv-resolve/bin/pip install -q -e '.[test,bench,runtimes]' && \
	{ grep '^#' constraints.txt; .venv-resolve/bin/pip freeze --exclude-editable | grep -v '^leantfx'; } > constraints.new && \
	mv constraints.new constraints.txt && rm -rf .venv-resolve

clean:
	rm -rf $(VENV) leantfx-output build *.egg-info
