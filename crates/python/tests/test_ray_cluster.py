"""flumen's datasource on a two-node local Ray cluster (``ray.cluster_utils.Cluster``, one CPU
per node): the read tasks spread over both nodes and every element arrives once."""

import pytest

ray = pytest.importorskip("ray")
import ray.data  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import flumen  # noqa: E402
import flumen.ray  # noqa: E402
from flumen import col  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_read_tasks_spread_over_two_nodes_and_deliver_each_element_once(two_nodes):
    ds = flumen.Dataset.range(2000).map({"y": col("value") + 1}).shuffle(100)

    def tag(batch):
        return batch.append_column("node", [[ray.get_runtime_context().get_node_id()] * batch.num_rows])

    rows = flumen.ray.read(ds, parallelism=4).map_batches(tag, batch_format="pyarrow", batch_size=None).take_all()
    assert sorted(r["value"] for r in rows) == list(range(2000))
    assert len({r["node"] for r in rows}) == 2
