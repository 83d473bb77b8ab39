"""The stage graph's order (rl/algorithms.py): the same as networkx's lexicographical topological
sort keyed on the list position (what it replaced: networkx is no longer imported to run), on
random stage DAGs; a cycle is refused."""
import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.rl.algorithms import Algorithm, Stage, build_algorithm
from simulator.scenario import load_scenario


@st.composite
def stage_dags(draw):
    n = draw(st.integers(1, 9))
    position = draw(st.permutations(range(n)))            # stage i sits at position[i] of a hidden order
    at = {p: i for i, p in enumerate(position)}
    stages = []
    for i in range(n):
        earlier = [f"s{at[q]}" for q in range(position[i])]
        deps = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        stages.append(Stage(f"s{i}", "forward", "actor", tuple(deps)))
    return tuple(stages)


@settings(max_examples=300, deadline=None)
@given(stage_dags())
def test_the_order_is_networkx_lexicographical_topological_sort(stages):
    alg = Algorithm("x", stages)
    names = [s.name for s in stages]
    want = list(nx.lexicographical_topological_sort(alg.graph(), key=names.index))
    assert [s.name for s in alg.ordered()] == want


def test_a_cycle_is_refused():
    alg = Algorithm("x", (Stage("a", "forward", "actor", ("b",)), Stage("b", "forward", "actor", ("a",))))
    with pytest.raises(AssertionError, match="acyclic"):
        alg.ordered()


def test_ppo_trains_the_critic_before_the_actor_after_every_forward():
    order = [s.name for s in build_algorithm(load_scenario(workload="ppo-llama3.1-70b").workload).ordered()]
    assert order == ["generate", "reward", "old_logprob", "reference", "critic_values", "train_critic",
                     "train_actor", "weight_sync"]
