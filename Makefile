# The two commands of the README.
#   make serve   install and start the service (SQLite file ./calibration.db, docs at /docs)
#   make test    install and run lint, the docs site build and the whole test suite (SQLite and Postgres)
VENV ?= .venv
SERVE_EXTRAS = plot,postgres,client
TEST_EXTRAS = dev,plot,postgres,torch,client,docs

.PHONY: serve test check lint clean

serve:
	scripts/install $(VENV) $(SERVE_EXTRAS) editable
	$(VENV)/bin/calibration-service serve

test:
	scripts/install $(VENV) $(TEST_EXTRAS) editable
	$(MAKE) --no-print-directory check

# what `make test` runs once installed: ruff, then the docs site's build beside the test suite, at the lowest
# CPU priority (nice): it takes the core time the suite leaves idle while its tests wait on servers,
# workers and timeouts, instead of a few seconds before the suite starts; it fails if either fails.
# The processes the tests start (servers, workers, the CLI) read the project's bytecode from a cache that
# the first one writes, even where the environment turns writing it off (PYTHONDONTWRITEBYTECODE)
check:
	$(VENV)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 nice -n 19 $(VENV)/bin/mkdocs build --strict --quiet & docs=$$!; \
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest; tests=$$?; \
	wait $$docs && exit $$tests

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build/site calibration.db calibration.db-wal calibration.db-shm
