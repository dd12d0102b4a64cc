# The two commands of the README.
#   make serve   install and start the service (SQLite file ./calibration.db, docs at /docs)
#   make test    install and run lint, the docs site build and the whole test suite (SQLite and Postgres)
VENV ?= .venv
SERVE_EXTRAS = plot,postgres,client
TEST_EXTRAS = dev,plot,postgres,torch,client,docs

.PHONY: serve test lint clean

serve:
	scripts/install $(VENV) $(SERVE_EXTRAS) editable
	$(VENV)/bin/calibration-service serve

test:
	scripts/install $(VENV) $(TEST_EXTRAS) editable
	$(VENV)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	# the processes the tests start (servers, workers, the CLI) read the project's bytecode from a cache that
	# the first one writes, even where the environment turns writing it off (PYTHONDONTWRITEBYTECODE)
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build/site calibration.db calibration.db-wal calibration.db-shm
