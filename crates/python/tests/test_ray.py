"""flumen on a local Ray cluster (two CPUs): the datasource reads every element exactly once
over 1, 2 and 4 tasks, deterministically, through a worker killed mid-read, with Ray's
projection and predicate pushdown reaching flumen's sources; ``MapBatches`` as a Ray Data
stage; ``train_iterator`` exactly once across ranks, resumed from its state, and inside a Ray
Train run whose worker dies and restarts from its checkpoint."""

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")
import ray.data  # noqa: E402
from ray.data.expressions import col as rcol  # noqa: E402

import flumen  # noqa: E402
import flumen.ray  # noqa: E402
from flumen import col  # noqa: E402

IMAGES = Path(__file__).resolve().parents[3] / "tests" / "data" / "images"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    yield
    ray.shutdown()


def shuffled_range(n=1000):
    return flumen.Dataset.range(n).map({"y": col("value") * 2}).filter(col("value") % 7 != 3).shuffle(64)


def expected_values(n=1000):
    return [v for v in range(n) if v % 7 != 3]


def record_files(tmp_path, files=3, per_file=50):
    paths = []
    for f in range(files):
        path = str(tmp_path / f"part-{f}.tfrecord")
        flumen.write_tfrecord(path, [flumen.serialize_example({"id": [f * 1000 + r]}) for r in range(per_file)])
        paths.append(path)
    return paths


def parsed(paths):
    return flumen.Dataset.read_files(paths, "tfrecord", cycle_length=2).parse_example(
        "record", {"id": ("int64", [])})


@pytest.mark.parametrize("tasks", [1, 2, 4])
def test_read_holds_every_element_once(tasks, tmp_path):
    rows = flumen.ray.read(shuffled_range(), parallelism=tasks).take_all()
    assert sorted(r["value"] for r in rows) == expected_values()
    assert all(r["y"] == 2 * r["value"] for r in rows)

    paths = record_files(tmp_path)
    source = flumen.ray.FlumenDatasource(parsed(paths), seed=1)
    assert source.split_policy(tasks) == "sources"
    # Ray's parallelism is capped at one task per file; an explicit one is kept.
    assert len(source.get_read_tasks(tasks)) == min(tasks, 3)
    ids = [r["id"] for r in flumen.ray.read(parsed(paths), parallelism=tasks).take_all()]
    assert sorted(ids) == sorted(f * 1000 + r for f in range(3) for r in range(50))


def test_tensor_fields_reach_numpy_with_their_shape():
    x = np.arange(100 * 8, dtype=np.float32).reshape(100, 2, 4)
    ds = flumen.Dataset.from_numpy({"x": x, "i": np.arange(100)})
    got = {}
    for batch in flumen.ray.read(ds, parallelism=3).iter_batches(batch_size=7, batch_format="numpy"):
        assert batch["x"].shape == (len(batch["i"]), 2, 4)
        got.update(zip(batch["i"].tolist(), batch["x"]))
    assert sorted(got) == list(range(100))
    for i, value in got.items():
        np.testing.assert_array_equal(value, x[i])


def test_a_pipeline_sharded_at_the_output_is_read_by_one_task_unless_asked():
    counted = shuffled_range().take(500)
    assert flumen.ray.FlumenDatasource(counted).split_policy(8) == "output (take counts or stops the stream)"
    assert len(flumen.ray.FlumenDatasource(counted).get_read_tasks(8)) == 1
    assert len(flumen.ray.FlumenDatasource(counted, parallelism=3).get_read_tasks(8)) == 3


def test_block_metadata_counts_the_rows_of_each_part():
    # Batches form within a part: 10 elements in 2 parts of 5 make 2 + 2 batches of 4, not 3.
    source = flumen.ray.FlumenDatasource(flumen.Dataset.range(10).batch(4))
    assert [t.metadata.num_rows for t in source.get_read_tasks(2)] == [2, 2]
    assert flumen.ray.read(flumen.Dataset.range(10).batch(4), parallelism=2).count() == 4


def test_read_is_deterministic_given_the_seed():
    def run(seed):
        return [r["value"] for r in flumen.ray.read(shuffled_range(), parallelism=2, seed=seed).take_all()]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_blocks_are_cut_by_bytes_of_rows_not_by_chunks():
    table = pa.table({"v": np.arange(100, dtype=np.int64), "s": [b"x" * (i % 5) for i in range(100)]})
    one = [t.num_rows for t in flumen.ray._blocks(table.to_batches(max_chunksize=100), 64)]
    many = [t.num_rows for t in flumen.ray._blocks(table.to_batches(max_chunksize=7), 64)]
    assert one == many and sum(one) == 100 and len(one) > 1


@pytest.mark.parametrize("policy", ["sources", "output"])
def test_a_read_task_whose_worker_dies_is_retried_and_every_element_arrives_once(policy, tmp_path):
    # Under the output policy each task's elements depend on the shuffle's order: only a
    # replay that draws the same order gives each element once.
    marker = str(tmp_path / "died")
    pipeline = shuffled_range() if policy == "sources" else shuffled_range().take(800)
    expected = sorted(int(e["value"]) for e in pipeline.split_for_worker(1, 0, 11)[0])
    assert flumen.ray.FlumenDatasource(pipeline).split_policy(2).startswith(policy)

    def die_once(batch):
        # The first attempt of the task holding value 700 kills its worker process.
        if 700 in batch["value"].to_pylist() and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return batch

    ds = flumen.ray.read(pipeline, parallelism=2, block_bytes=256, seed=11)
    rows = ds.map_batches(die_once, batch_format="pyarrow", batch_size=None).take_all()
    assert os.path.exists(marker), "the worker was not killed"
    assert sorted(r["value"] for r in rows) == expected


def test_projection_and_predicate_reach_flumens_sources(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": list(range(40)), "b": [float(i) for i in range(40)], "c": ["x"] * 40}),
                   path, row_group_size=8)
    ds = flumen.ray.read(flumen.Dataset.parquet(path), parallelism=2)
    rows = ds.filter(expr=rcol("a") >= 30).select_columns(["b"]).take_all()
    assert sorted(r["b"] for r in rows) == [float(i) for i in range(30, 40)]
    assert all(set(r) == {"b"} for r in rows)

    source = flumen.ray.FlumenDatasource(flumen.Dataset.parquet(path))
    source = source.apply_predicate(rcol("a") >= 30).apply_projection({"b": "b"})
    plan = source.dataset.explain().split("== Optimized plan ==")[1]
    assert "columns [b], where (a >= 30)" in plan, plan
    # What flumen cannot express stays with Ray.
    assert source.apply_predicate(rcol("c").is_null()) is source


def test_map_batches_runs_a_flumen_fragment_in_a_ray_pipeline():
    fragment = flumen.ray.MapBatches(lambda d: d.map({"y": col("id") * 3}, keep=False).filter(col("y") % 2 == 0))
    rows = ray.data.range(200).map_batches(fragment, batch_format="pyarrow", batch_size=32).take_all()
    assert sorted(r["y"] for r in rows) == [3 * i for i in range(200) if (3 * i) % 2 == 0]


def test_map_batches_draws_afresh_for_each_batch():
    data = (IMAGES / "tf_baseline_52x40.jpg").read_bytes()
    table = pa.table({"image": pa.array([data] * 6, pa.binary())})
    crop = flumen.ray.MapBatches(
        lambda d: d.map({"crop": flumen.random_crop(flumen.decode_jpeg(col("image")), (8, 8), seed=1)}, keep=False))
    first, second = crop(table), crop(table)
    assert first.num_rows == second.num_rows == 6
    assert first.column("crop").to_pylist() != second.column("crop").to_pylist()


@pytest.mark.parametrize("world", [1, 2, 4])
def test_train_iterator_gives_each_element_to_one_rank_per_epoch(world):
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            it = flumen.ray.train_iterator(shuffled_range(), rank=rank, world_size=world, epoch=epoch, seed=3)
            seen += [int(e["value"]) for e in it]
        assert sorted(seen) == expected_values()


def test_train_iterator_is_deterministic_and_reshuffles_by_epoch():
    def order(epoch, seed=3):
        return [int(e["value"]) for e in flumen.ray.train_iterator(
            shuffled_range(), rank=1, world_size=2, epoch=epoch, seed=seed)]

    assert order(0) == order(0)
    assert order(0) != order(1)
    assert order(0) != order(0, seed=4)


def test_train_iterator_resumes_from_its_state(tmp_path):
    whole = [int(e["value"]) for e in flumen.ray.train_iterator(shuffled_range(), rank=0, world_size=2, seed=3)]
    it = flumen.ray.train_iterator(shuffled_range(), rank=0, world_size=2, seed=3)
    head = [int(next(it)["value"]) for _ in range(100)]
    it.save_to(str(tmp_path))
    resumed = flumen.ray.train_iterator(shuffled_range(), rank=0, world_size=2, seed=3, checkpoint=str(tmp_path))
    assert head + [int(e["value"]) for e in resumed] == whole
    with pytest.raises(ValueError, match="world size 2"):
        flumen.ray.train_iterator(shuffled_range(), rank=0, world_size=4, seed=3, checkpoint=it.state())


def test_ray_train_workers_restart_from_their_checkpoints(tmp_path):
    pytest.importorskip("pydantic")
    from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    out, marker = tmp_path / "out", tmp_path / "died"
    out.mkdir()

    def loop(config):
        import json
        import tempfile

        import ray.train

        import flumen
        import flumen.ray

        rank = ray.train.get_context().get_world_rank()
        restored = ray.train.get_checkpoint()
        seen = []
        if restored is not None:
            with restored.as_directory() as d:
                seen = json.loads(Path(d, f"seen-{rank}.json").read_text())
        it = flumen.ray.train_iterator(flumen.Dataset.deserialize(config["plan"]), seed=9, checkpoint=restored)
        for step, element in enumerate(it, start=len(seen)):
            seen.append(int(element["value"]))
            if step % 100 == 99:  # the model's and the input's state, saved together
                with tempfile.TemporaryDirectory() as d:
                    it.save_to(d)
                    Path(d, f"seen-{rank}.json").write_text(json.dumps(seen))
                    ray.train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
            if rank == 1 and step == 250 and not os.path.exists(config["marker"]):
                open(config["marker"], "w").close()
                os._exit(1)
        Path(config["out"], f"rank-{rank}.json").write_text(json.dumps(seen))

    trainer = DataParallelTrainer(
        loop,
        train_loop_config={"plan": shuffled_range().serialize(), "out": str(out), "marker": str(marker)},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=str(tmp_path / "storage"), name="ingest",
                             failure_config=FailureConfig(max_failures=1)),
    )
    result = trainer.fit()
    assert result.error is None
    assert marker.exists(), "the worker was not killed"
    import json

    seen = [v for rank in (0, 1) for v in json.loads((out / f"rank-{rank}.json").read_text())]
    assert sorted(seen) == expected_values()
