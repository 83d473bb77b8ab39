"""A schedule kind added from outside the package: one config class, one runner, one register call,
and it runs end to end (scenario validation, the runner parts, metrics, the CLI) with no edit elsewhere."""
import json
from typing import ClassVar, Literal

import numpy as np
import pytest

import simulator
from simulator import cli, metrics
from simulator.errors import RlsimError
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import SchedulePolicy, registry, run_schedule
from simulator.rl.schedules.batches import SeqBatch
from simulator.rl.schedules.context import Context
from simulator.rl.timeline import GroupClock
from simulator.scenario import ScheduleConfig, load_scenario
from tests.fresh_python import json_of_fresh_python


class GenerateThenTrain(ScheduleConfig):
    """Toy: every device generates the round, then every device trains; no switch, no weight sync."""
    ACCEPTS: ClassVar[frozenset[str]] = frozenset()
    kind: Literal["toy-generate-then-train"] = "toy-generate-then-train"


def toy_run(ctx: Context) -> float:
    env, pool = ctx.env, ctx.pools["actor"]
    d = ctx.costs.instance_devices
    n_inst = pool.count // d
    clock = GroupClock(ctx.timeline, "actor", pool.start, pool.count)
    ctx.clocks.append(clock)

    def main():
        for k in range(ctx.scenario.iterations):
            t0 = env.now
            results = [ctx.gen.generate(SeqBatch.concat(SeqBatch.empty(), ctx.draws.share(k, i, n_inst)), t0, k,
                                        pool.ranks[i * d:(i + 1) * d]) for i in range(n_inst)]
            ends = np.array([end for end, _, _ in results])
            clock.per_instance("generate", ends - t0, float(ends.max()), d, k, "long_tail")
            t_ready, ids = ctx.trainer.ready_time(k, True)
            clock.idle("dependency", t_ready, k)
            yield env.timeout(t_ready - env.now)
            yield from ctx.trainer.run(k, ids, clock)
            ctx.iterations[-1]["end"] = env.now

    env.run(until=env.process(main()))
    return env.now


@pytest.fixture
def toy_kind():
    policy = registry.register(SchedulePolicy(GenerateThenTrain, toy_run, "toy: generate, then train"))
    yield policy.kind
    registry.unregister(policy.kind)


def const(value):
    return lambda rng, n_prompts, n, step: np.full((n_prompts, n), value, int)


def test_a_registered_kind_runs_and_matches_its_closed_form(toy_kind):
    sc = load_scenario({"topology": "fake", "workload": {"model": "fake", "prompts_per_step": 8,
                                                         "samples_per_prompt": 8},
                        "schedule": {"kind": toy_kind}, "iterations": 3})
    costs = FakeCosts(instance_devices=2, train_group_devices=2, decode_s_per_token=1e-3,
                      train_device_s_per_token=1e-3, forward_device_s_per_token=2e-4)
    rec = run_schedule(sc, costs, 8, const(100), const(500))
    tl, sm = rec.timeline.to_frame(), rec.samples.to_frame()
    s = metrics.summary(rec, tl, sm)
    tokens = 64 * 600
    fetch = 2 * tokens * sc.schedule.distqueue.bytes_per_token / sc.schedule.distqueue.bw_Bps
    step = 500 * 1e-3 + fetch + 2 * tokens * 2e-4 / 8 + tokens * 1e-3 / 8
    assert s["step_time_s"] == pytest.approx(step, rel=1e-9)
    assert s["samples"]["consumed"] == 3 * 64


def test_a_registered_kind_refuses_knobs_it_does_not_take(toy_kind):
    with pytest.raises(RlsimError) as err:
        load_scenario(schedule={"kind": toy_kind, "staleness": 1})
    assert "schedule.staleness" in str(err.value)


def test_a_registered_kind_runs_through_the_api_and_the_cli(toy_kind, capsys):
    small = ["workload.prompts_per_step=8", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=8"]
    r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1},
                           schedule=toy_kind, iterations=2, overrides=small)
    assert r.summary["schedule"] == toy_kind and r.summary["step_time_s"] > 0
    code = cli.main(["run", "--workload", "grpo-qwen2.5-7b", "--topology", "dgx-h100", "--schedule", toy_kind,
                     "--iterations", "2", "--json", *[x for item in small for x in ("--set", item)]])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["schedule"] == toy_kind


def test_an_unregistered_kind_is_a_clear_error(toy_kind):
    registry.unregister(toy_kind)
    with pytest.raises(RlsimError) as err:
        load_scenario(schedule=toy_kind)
    assert "schedule" in str(err.value)
    registry.register(SchedulePolicy(GenerateThenTrain, toy_run, "toy: generate, then train"))


# The built-in kinds load on first use (registry.BUILTIN_MODULES); checked in a fresh interpreter,
# where no test has imported the kinds' modules yet.
LAZY_KINDS = """
import json, sys
from simulator.rl.schedules import SchedulePolicy, registry
from simulator.scenario import ArealSchedule
before = [m for m in sys.modules if m.startswith("simulator.rl.schedules.")]
mine = registry.register(SchedulePolicy(ArealSchedule, lambda ctx: 0.0, "replaces areal"))
colocated = registry.get("colocated")
print(json.dumps({"before": before, "kinds": registry.kinds(), "areal_is_mine": registry.get("areal") is mine,
                  "colocated": colocated.description}))
"""


def test_builtin_kinds_load_on_first_use_in_a_fixed_order_and_an_outside_policy_wins():
    out = json_of_fresh_python(LAZY_KINDS)
    kind_modules = {f"simulator.rl.schedules.{m}" for m in registry.BUILTIN_MODULES.values()}
    assert not kind_modules & set(out["before"])           # importing the package loads no kind
    assert out["kinds"] == list(registry.BUILTIN_MODULES)  # the same order whatever loaded first
    assert out["areal_is_mine"]                            # areal's module loaded later, did not replace it
    assert out["colocated"].startswith("RL Fusion")


def test_kinds_lists_the_builtins_first_then_the_added_ones(toy_kind):
    assert registry.kinds() == [*registry.BUILTIN_MODULES, toy_kind]
