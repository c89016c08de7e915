# Two commands set everything up on a fresh machine: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-unit lint ui java chromium postgresql clean rest-server

# pip compiles the packages' modules one at a time (80 s of CPU); compileall does it on every core. They are
# compiled at all because where PYTHONDONTWRITEBYTECODE is set, every process would compile its imports afresh.
$(VENV)/installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'
	$(PY) -m compileall -q -j 0 $(VENV)/lib >/dev/null
	touch $@

java:
	@java -version 2>&1 | grep -Eq 'version "(17|21)' || { \
	  echo "Spark needs Java 17 (or 21). Install it, e.g. 'sudo apt-get install openjdk-17-jre-headless'," \
	       "or on macOS 'brew install openjdk@17', then set JAVA_HOME."; exit 1; }

# The jars Spark needs for the lake's Iceberg tables, resolved by Maven from jars/pom.xml into jars/lib
# (ignored by git); engine/spark.py puts them on every session's classpath. Nothing is fetched at run time.
JARS := jars/lib/.resolved
$(JARS): jars/pom.xml
	rm -rf jars/lib
	mvn -q -B -f jars/pom.xml dependency:copy-dependencies -DoutputDirectory=lib -DexcludeTransitive=true
	touch $@

# A class-data archive of the Spark driver (engine/class_archive.py): every driver Medallion starts maps its
# classes instead of loading and verifying them one by one, a third of a short run's CPU. Recorded from a
# short session whenever the jars, the packages or the JDK change; its log is kept beside it.
SPARK_ARCHIVE := jars/lib/spark-driver.jsa
$(SPARK_ARCHIVE): $(JARS) $(VENV)/installed $(realpath $(shell command -v java))
	$(PY) -m medallion_assets.engine.class_archive > jars/lib/class-archive.log 2>&1 || \
	  { tail -20 jars/lib/class-archive.log; exit 1; }

jars: $(JARS) $(SPARK_ARCHIVE)

# The tests' Iceberg REST catalog server (Iceberg's own RESTCatalogServer), resolved from jars/rest-server/pom.xml
# into jars/rest-server/lib (ignored by git); tests/rest_catalog.py starts it on loopback.
REST_SERVER := jars/rest-server/lib/.resolved
# After the lake's jars, never beside them: two Maven runs filling one local repository could clash.
$(REST_SERVER): jars/rest-server/pom.xml | $(JARS)
	rm -rf jars/rest-server/lib
	mvn -q -B -f jars/rest-server/pom.xml dependency:copy-dependencies -DoutputDirectory=lib
	touch $@

rest-server: $(REST_SERVER)

# The demo fills the embedded home, .medallion/, afresh; every other command then defaults to it.
demo: java $(JARS) $(VENV)/installed $(SPARK_ARCHIVE)
	rm -rf .medallion
	$(VENV)/bin/medallion demo

# The browser test drives Debian's Chromium and its driver (tests/test_browser.py).
chromium:
	@[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || { \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium chromium-driver; }

# The tests' PostgreSQL (the production catalog and the Redshift-protocol stand-in): Debian's server, installed
# when missing and started when not running. Debian's server asks for a password on 127.0.0.1: the tests give
# TEST_PG_PASSWORD through libpq's PGPASSWORD, set here for the postgres role when it does not already work,
# as a verifier of few iterations (tests/scram_verifier.py says why).
TEST_PG_SCRAM_ITERATIONS := 16
TEST_PG_PASSWORD := pg-test-5e1c9a
AS_POSTGRES := $(shell [ "$$(id -u)" = 0 ] && echo runuser -u postgres -- || echo sudo -u postgres)
postgresql:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y postgresql; }
	@pg_isready -q -h 127.0.0.1 -p 5432 || \
	  $(SUDO) pg_ctlcluster --skip-systemctl-redirect "$$(ls /etc/postgresql | head -1)" main start
	@PGPASSWORD=$(TEST_PG_PASSWORD) psql -h 127.0.0.1 -U postgres -tAc "SELECT rolpassword LIKE \
	  'SCRAM-SHA-256\$$$(TEST_PG_SCRAM_ITERATIONS):%' FROM pg_authid WHERE rolname = current_user" 2>/dev/null | \
	  grep -qx t || $(AS_POSTGRES) psql -q -c "ALTER USER postgres PASSWORD \
	  '$$(python3 tests/scram_verifier.py $(TEST_PG_PASSWORD) $(TEST_PG_SCRAM_ITERATIONS))'"

# Static checks, one command per line; `make test` runs them before the tests. The layers are the
# [tool.importlinter] contracts in pyproject.toml (see ARCHITECTURE.md).
# Layers (import-linter), style (ruff, line length 110) and types (mypy, strict, on medallion_assets/).
lint: $(VENV)/installed
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check medallion_assets tests bench
	$(VENV)/bin/ruff format --check medallion_assets tests bench
	$(VENV)/bin/mypy

# Each worker has its own Spark session and S3 API server (tests/conftest.py). The suite now keeps both cores
# busy, so more workers only share them more thinly: on one machine in one hour, four workers ran it in
# 1,474 s and six in 1,645 s (bench/HISTORY.md, session 31). Tests that share a costly server carry an
# xdist_group mark, and `loadgroup` runs each group on one worker.
TEST_WORKERS ?= 4
# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machine), each of the suite's few hundred
# processes (commands, code servers, run workers) would compile Medallion's modules afresh, 0.4 s of CPU
# each: they are compiled once here. The static checks (one core) run beside the jars and the class archive,
# a minute sooner than one after the other.
test: java chromium postgresql $(VENV)/installed
	$(MAKE) --no-print-directory -j 2 --output-sync=target lint $(JARS) $(REST_SERVER) $(SPARK_ARCHIVE)
	$(PY) -m compileall -q medallion_assets tests bench
	PGPASSWORD=$(TEST_PG_PASSWORD) $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The unit tier alone (no Spark, S3, PostgreSQL, daemon or browser): tests/conftest.py says which tests those are.
test-unit: $(VENV)/installed
	$(VENV)/bin/pytest -q -m unit

ui: java $(JARS) $(VENV)/installed $(SPARK_ARCHIVE)
	test -f .medallion/catalog.db || $(MAKE) demo
	$(VENV)/bin/medallion ui

clean:
	rm -rf .medallion $(VENV) jars/lib jars/rest-server/lib
