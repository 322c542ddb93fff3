"""NodeAffinity keeps each selector's mask over the nodes until a node's facts change: a relabelled node is
matched afresh, and a check of a few nodes is answered without a pass over all of them."""
import numpy as np
from fgpu_operator.placement.filters import NodeAffinity, filter_nodes
from fgpu_operator.placement.model import Cluster, Constraints, NodeSpec, Request, SelectorTerm


def _cluster() -> Cluster:
    return Cluster([NodeSpec(f"n{i}", 8000, 8000, 1, "A100", labels=(("zone", "a" if i < 2 else "b"),))
                    for i in range(4)])


IN_A = Request("p", 100, num_gpu=1, gpu_milli=300,
               constraints=Constraints(affinity_terms=(SelectorTerm((("zone", "In", ("a",)),)),)))


def test_a_relabelled_node_is_matched_afresh():
    c = _cluster()
    assert filter_nodes(c, IN_A).tolist() == [True, True, False, False]
    c.update_node_facts(3, NodeSpec("n3", 8000, 8000, 1, "A100", labels=(("zone", "a"),)))
    assert filter_nodes(c, IN_A).tolist() == [True, True, False, True]
    c.update_node_facts(0, NodeSpec("n0", 8000, 8000, 1, "A100", labels=()))
    assert filter_nodes(c, IN_A).tolist() == [False, True, False, True]


def test_rows_are_answered_from_the_mask_or_alone():
    c = _cluster()
    ((_, bad),) = NodeAffinity().failures(c, IN_A, np.array([2, 0]))  # nothing kept yet: those two only
    assert bad.tolist() == [True, False] and not c.plugin_state[NodeAffinity.name][1]
    filter_nodes(c, IN_A)
    ((_, bad),) = NodeAffinity().failures(c, IN_A, np.array([3, 1]))
    assert bad.tolist() == [True, False] and len(c.plugin_state[NodeAffinity.name][1]) == 1
