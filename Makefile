# The two set-up commands are `make cluster` and `make test`; both create the venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime

.PHONY: venv venv-runtime test test-unit test-integration test-wheel test-flood test-systemd cluster cluster-status bench bench-state bench-backup clean

# With the test extras (`make test`); `make cluster` needs the runtime dependencies only.
venv: $(STAMP)
venv-runtime: $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# One mixed fault-injection run of about a minute (the smoke run), then the suite; both always
# run, either failing fails the target, and pytest's summary stays the closing line.
# The suite runs in TEST_WORKERS pytest-xdist processes: its integration half mostly waits on node
# processes (elections, restarts, timeouts), so two workers on 2 cores halve the wall clock; worksteal
# hands a worker whose queue ran dry the other's pending tests, so the long ones do not end it alone
# (tests/integration/port_blocks.py keeps the workers' fixed ports apart). TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 2

test: venv
	@$(MAKE) --no-print-directory jepsen-smoke; smoke=$$?; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal; suite=$$?; \
	[ $$smoke -eq 0 ] || echo "make test: the jepsen smoke run failed (exit $$smoke); see jepsen/store/latest/report.md"; \
	[ $$smoke -eq 0 ] && [ $$suite -eq 0 ]

test-unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal tests/unit tests/property

test-integration: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal tests/integration

# A non-editable install: the wheel built from this tree, in a fresh venv, runs a node and the CLI,
# and its SDK type-checks for a user (about 30 s; part of `make test` too).
test-wheel: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_wheel_install.py

# A node under 20,000 idle connections and a malformed-request flood, at the default connection
# bound; every /health probe within 100 ms (`make test` runs 3,000 against a bound of 1,000).
# Run it on a quiet machine: it measures latency.
test-flood: venv
	FLOOD_CONNECTIONS=20000 FLOOD_MAX_CONNECTIONS=4096 FLOOD_HEALTH_STAT=max \
		$(BIN)/python -m pytest -q -p no:cacheprovider -s tests/integration/test_node_connection_flood.py

# deploy/systemd/queen-raft@.service under a real systemd as PID 1: a Debian machine booted by
# systemd-nspawn runs three instances (about a minute; the first run also debootstraps the machine
# into data/systemd-rootfs, a few minutes more). Needs root. Not part of `make test`.
test-systemd: venv
	@command -v systemd-nspawn >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd-container debootstrap; }
	$(BIN)/python -m pytest -q -p no:cacheprovider -s tests/system/test_systemd_unit.py

# Three nodes on 127.0.0.1 (HTTP 6632-6634): waits for every group's leader, prints URLs and tokens,
# stops all three by PID on Ctrl-C. CLUSTER_CONFIG=cluster_configs/single.toml for one node.
CLUSTER_CONFIG ?= cluster_configs/local-3.toml

cluster: venv-runtime
	$(BIN)/python -m queen_raft cluster up --config $(CLUSTER_CONFIG)

cluster-status: venv-runtime
	$(BIN)/python -m queen_raft cluster status --config $(CLUSTER_CONFIG)

# One node of the cluster, while `make cluster` runs or without it: `make node-kill NODE=n2` (SIGKILL),
# node-stop (SIGTERM, waits), node-start (detached; a running `make cluster` adopts it), node-restart.
# cluster-restart-all restarts every node one at a time, each caught up before the next.
.PHONY: node-start node-stop node-kill node-restart cluster-restart-all
node-start node-stop node-kill node-restart: venv
	@test -n "$(NODE)" || { echo "give the node: make $@ NODE=n2"; exit 2; }
	$(BIN)/python -m queen_raft cluster $(patsubst node-%,%,$@) $(NODE) --config $(CLUSTER_CONFIG)

cluster-restart-all: venv
	$(BIN)/python -m queen_raft cluster restart-all --config $(CLUSTER_CONFIG)

# The benchmark suite (bench/): ours against etcd, Redis and PostgreSQL, installed by the suite itself.
# One scenario alone: $(BIN)/python -m bench <scenario> [--quick]
bench: venv
	$(BIN)/pip install --quiet -r bench/requirements.txt
	$(BIN)/python -m bench all

bench-state: venv
	$(BIN)/python bench/state_bench.py

# Backup and restore of 1,000,000 pending timers through real commands (bench/README.md).
bench-backup: venv
	$(BIN)/python bench/backup_restore.py

clean:
	rm -rf $(VENV) build *.egg-info

# Fault injection (jepsen/): every run holds both tenants (timers beside queue + txn, or a message
# workload beside timers). The full campaign (14 runs, about 20 minutes; the seed-1 mixed and the
# snapshot-fault runs over a million preloaded timers; two runs under power losses), one mixed timers + queue + txn run of about a
# minute plus its final phase over a smoke-sized preload, and one mixed run of the transactions
# workload beside timers (about 90 s).
.PHONY: jepsen jepsen-smoke jepsen-txn jepsen-power-control
jepsen: venv
	$(BIN)/python -m jepsen campaign

jepsen-smoke: venv
	$(BIN)/python -m jepsen run --workload timers --nemesis mixed --seed 1 --duration 60 --preload 20000

jepsen-txn: venv
	$(BIN)/python -m jepsen run --workload txn --nemesis mixed --seed 1 --duration 45

# The power nemesis's control (not in the campaign): its two runs (timers beside queue + txn, seeds 1
# and 2) with QUEEN_RAFT_FSYNC=off must lose acknowledged writes, or the passes with fsync=group
# prove nothing (about 4 min).
jepsen-power-control: venv
	$(BIN)/python -m jepsen.power_control
