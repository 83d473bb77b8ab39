"""Sweep dispatch: costliest points first (the order changes no byte of the results), one Dask
cluster per `with executor:` block, and a LocalCluster of worker processes giving jobs=1's rows."""
from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.sweep import (
    BaseScenario,
    DaskExecutor,
    LocalExecutor,
    ResultsStore,
    SerialExecutor,
    dispatch_order,
    make_points,
    run_sweep,
)
from tests.test_sweep import fake_point


def nodes_cost(values: dict) -> float:
    return float(values["topology.nodes"])


class Recorder:
    """A point function that notes the order it is called in (the serial executor's dispatch order)."""

    def __init__(self) -> None:
        self.order: list[int] = []

    def __call__(self, values: dict) -> dict:
        self.order.append(values["topology.nodes"])
        return fake_point(values)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12))
def test_dispatch_order_is_costliest_first_ties_in_grid_order(costs):
    points = make_points({"i": list(range(len(costs)))}, "")
    ordered = dispatch_order(points, lambda values: costs[values["i"]])
    assert sorted(p.index for p in ordered) == list(range(len(costs)))   # a permutation
    keys = [(-costs[p.index], p.index) for p in ordered]
    assert keys == sorted(keys)
    assert dispatch_order(points, None) == points


def test_the_dispatch_order_changes_no_byte_of_the_results(tmp_path):
    grid = {"topology.nodes": [1, 4, 2, 8], "schedule.staleness": [0, 1]}
    points = make_points(grid, "b")
    recorder = Recorder()
    costly_first = ResultsStore(tmp_path / "costly_first.csv")
    in_grid_order = ResultsStore(tmp_path / "grid_order.csv")
    result = run_sweep(points, recorder, store=costly_first, grid=grid, cost=nodes_cost)
    assert recorder.order == [8, 8, 4, 4, 2, 2, 1, 1]            # the order points were handed out
    plain = run_sweep(points, fake_point, store=in_grid_order, grid=grid)
    assert costly_first.path.read_bytes() == in_grid_order.path.read_bytes()
    assert result.run_objects() == plain.run_objects()
    assert [o["grid"]["topology.nodes"] for o in result.run_objects()] == [1, 1, 4, 4, 2, 2, 8, 8]  # grid order
    pooled = run_sweep(points, fake_point, store=ResultsStore(tmp_path / "pool.csv"),
                       executor=LocalExecutor(jobs=2), grid=grid, cost=nodes_cost)
    assert pooled.run_objects() == plain.run_objects()


def test_a_resumed_sweep_orders_only_the_points_left(tmp_path):
    store = ResultsStore(tmp_path / "results.csv")
    run_sweep(make_points({"topology.nodes": [8, 2]}, "b"), fake_point, store=store)
    recorder = Recorder()
    run_sweep(make_points({"topology.nodes": [1, 8, 4, 2]}, "b"), recorder, store=store, cost=nodes_cost)
    assert recorder.order == [4, 1]


def test_the_work_estimate_ranks_a_larger_point_costlier():
    base = BaseScenario(iterations=2)
    one, four = base.work_units({"topology.supernodes": 1}), base.work_units({"topology.supernodes": 4})
    assert 0 < one < four
    assert base.work_units({"iterations": 4}) == 2 * base.work_units({})
    assert base.work_units({"topology.supernodes": 0}) == 0   # does not load: evaluated anyway, its row says why


def which_process(values: dict) -> dict:
    time.sleep(0.02)
    return {**fake_point(values), "pid": os.getpid()}


def test_one_dask_cluster_serves_every_call_inside_a_with_block():
    grid = {"topology.nodes": [1, 2]}
    executor = DaskExecutor(jobs=1, processes=False)
    with executor:
        assert executor._client is None                       # nothing to evaluate yet: no cluster
        run_sweep(make_points(grid, "a"), fake_point, executor=executor)
        client = executor._client
        run_sweep(make_points(grid, "b"), fake_point, executor=executor)
        assert executor._client is client and client.status == "running"
    assert executor._client is None and client.status == "closed"
    run_sweep(make_points(grid, "c"), fake_point, executor=executor)   # outside a block: its own, closed after
    assert executor._client is None


def test_a_local_cluster_of_worker_processes_gives_the_serial_rows(tmp_path):
    """Two Dask worker processes (started as `rlsim sweep --executor dask` starts them, the preload
    imported as each starts): the same bytes as jobs=1."""
    grid = {"topology.nodes": [1, 2, 4, 8], "schedule.staleness": [0, 1]}
    points = make_points(grid, "b")
    serial = run_sweep(points, which_process, store=ResultsStore(tmp_path / "serial.csv"),
                       executor=SerialExecutor(), grid=grid)
    dask = run_sweep(points, which_process, store=ResultsStore(tmp_path / "dask.csv"), grid=grid,
                     executor=DaskExecutor(jobs=2, preload=("colorsys",)), cost=nodes_cost)
    drop_pid = [{k: v for k, v in o.items() if k != "pid"} for o in serial.run_objects()]
    assert [{k: v for k, v in o.items() if k != "pid"} for o in dask.run_objects()] == drop_pid
    assert {o["pid"] for o in dask.run_objects()}.isdisjoint({os.getpid()})   # ran in the workers


def stamped(values: dict) -> dict:
    time.sleep(0.01)
    return {**fake_point(values), "finished_at": time.monotonic()}


def test_dask_hands_out_points_in_the_order_given():
    grid = {"topology.nodes": [1, 4, 2, 8, 3]}
    executor = DaskExecutor(jobs=1, processes=False)   # one worker thread: the run order is the hand-out order
    result = run_sweep(make_points(grid, "o"), stamped, executor=executor, cost=nodes_cost)
    ran = sorted(result.run_objects(), key=lambda o: o["finished_at"])
    assert [o["grid"]["topology.nodes"] for o in ran] == [8, 4, 3, 2, 1]


def test_the_local_cluster_does_not_sample_its_workers_stacks():
    """Dask's statistical profiler (every 10 ms) cost the simulator's points 50-80% more CPU; rlsim's
    LocalCluster has no dashboard to show it, so its workers run without it."""
    with DaskExecutor(jobs=1, processes=False) as executor:
        client = executor.start()
        sampling = client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks)
    assert list(sampling.values()) == [False]


def _report_signals(queue) -> None:
    import signal
    queue.put((signal.getsignal(signal.SIGINT) == signal.SIG_IGN, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_started_for_a_dask_cluster_ignore_ctrl_c(method):
    # a terminal's Ctrl-C reaches the whole process group: each Dask worker printed its
    # KeyboardInterrupt (or the sweep's inherited Terminated) while the sweep stopped cleanly
    import multiprocessing
    import signal

    from simulator.sweep import _workers_started_deaf

    before = signal.getsignal(signal.SIGINT)
    context = multiprocessing.get_context(method)
    queue = context.Queue()
    with _workers_started_deaf():
        child = context.Process(target=_report_signals, args=(queue,))
        child.start()
    assert queue.get(timeout=60) == (True, True)
    child.join(timeout=60)
    assert signal.getsignal(signal.SIGINT) is before   # the parent's handler back after the start
