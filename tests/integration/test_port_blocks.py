"""The fixed port blocks of two xdist workers never meet, and a serial run keeps the bases."""

from port_blocks import WORKER_STRIDE, worker_index, worker_port

# Every fixed base the in-process Raft tests count up from (see port_blocks.py).
FIXED_BASES = (17300, 17500, 17600, 17700, 17800, 17900, 17950)


def test_a_serial_run_keeps_the_fixed_bases(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert worker_index() == 0
    assert [worker_port(base) for base in FIXED_BASES] == list(FIXED_BASES)


def test_each_worker_takes_its_own_copy_of_every_block(monkeypatch):
    copies = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        copies.append({worker_port(base) for base in FIXED_BASES})
    assert copies[0] == set(FIXED_BASES)
    assert copies[1] == {base + WORKER_STRIDE for base in FIXED_BASES}
    # A worker's blocks span less than the stride, so no two workers' ranges overlap.
    assert max(FIXED_BASES) - min(FIXED_BASES) < WORKER_STRIDE
    assert max(copies[0]) < min(copies[1]) and max(copies[1]) < min(copies[2])
