import pytest
from trace_rows import NODES, PODS_HEADER, pod_rows


@pytest.fixture
def small_trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    pods = tmp_path / "openb_pod_list_small.csv"
    pods.write_text(PODS_HEADER + "".join(pod_rows()))
    return nodes, pods
