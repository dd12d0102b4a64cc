# The two commands of the README.
#   make serve   install and start the service (SQLite file ./calibration.db, docs at /docs)
#   make test    install and run lint and the whole test suite (SQLite and Postgres)
VENV ?= .venv
SERVE_EXTRAS = plot,postgres,client
TEST_EXTRAS = dev,plot,postgres,torch,client

.PHONY: serve test lint clean

serve:
	scripts/install $(VENV) $(SERVE_EXTRAS) editable
	$(VENV)/bin/calibration-service serve

test:
	scripts/install $(VENV) $(TEST_EXTRAS) editable
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) calibration.db calibration.db-wal calibration.db-shm
