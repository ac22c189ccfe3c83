"""The Python package: sources, transformations, expressions, iteration without copies,
checkpoints and errors, against results computed here in Python."""

import threading
import time

import numpy as np
import pytest

import flumen
from flumen import col


def values(ds, field="value"):
    return [int(v) for element in ds for v in np.asarray(element[field]).ravel()]


def test_range_map_filter_batch_give_the_python_result():
    ds = (flumen.Dataset.range(100)
          .map({"y": col("value") * 3 + 1})
          .filter(col("y") % 2 == 0)
          .batch(8))
    expected = [v * 3 + 1 for v in range(100) if (v * 3 + 1) % 2 == 0]
    got = [int(y) for b in ds for y in b["y"]]
    assert got == expected
    first = next(iter(ds))
    assert first["y"].shape == (8,)
    assert first["y"].dtype == np.int64


def test_batches_are_read_only_views_of_flumen_buffers():
    ds = flumen.Dataset.range(1000).batch(100, drop_remainder=True)
    batch = next(iter(ds))
    array = batch["value"]
    assert not array.flags.writeable
    assert not array.flags.owndata  # a view: numpy did not copy
    with pytest.raises(ValueError):
        array[0] = 7
    assert list(array[:3]) == [0, 1, 2]


def test_fixed_size_fields_are_two_dimensional_views():
    ds = flumen.Dataset.range(12).batch(3, drop_remainder=True).batch(2, drop_remainder=True)
    first = next(iter(ds))["value"]
    assert first.shape == (2, 3)
    assert first.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not first.flags.owndata


def test_expressions_cast_and_functions():
    ds = flumen.Dataset.range(1, 5).map(
        {"r": flumen.sqrt(col("value").cast("float64")), "c": flumen.clip(col("value"), 2, 3)}, keep=False)
    rows = [(float(b["r"]), int(b["c"])) for b in ds]  # scalars, as tf.data gives them
    assert rows == [(1.0, 2), (2 ** 0.5, 2), (3 ** 0.5, 3), (2.0, 3)]
    with pytest.raises(TypeError):
        bool(col("value") > 1)


def test_shuffle_is_a_permutation_and_seeded():
    ds = flumen.Dataset.range(50).shuffle(20, seed=3, reshuffle_each_iteration=False)
    first, second = values(ds), values(ds.with_options(flumen.Options(threads=1)))
    assert sorted(first) == list(range(50))
    assert first != list(range(50))
    assert first == values(flumen.Dataset.range(50).shuffle(20, seed=3, reshuffle_each_iteration=False))
    assert second == first
    # As in tf.data, each new pass of a reshuffling dataset has another order.
    reshuffled = flumen.Dataset.range(50).shuffle(20, seed=3)
    assert values(reshuffled) != values(reshuffled)


def test_take_skip_shard_repeat_concatenate():
    ds = flumen.Dataset.range(10)
    assert values(ds.skip(2).take(3)) == [2, 3, 4]
    assert values(ds.shard(3, 1)) == [1, 4, 7]
    assert values(ds.take(2).repeat(3)) == [0, 1] * 3
    assert values(ds.take(2).concatenate(ds.skip(8))) == [0, 1, 8, 9]
    assert ds.cardinality == 10


def test_csv_text_and_arrow_sources(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("a,b\n1,x\n2,y\n")
    rows = [(int(b["a"]), b["b"]) for b in flumen.Dataset.csv(str(path))]
    assert rows == [(1, "x"), (2, "y")]
    text = tmp_path / "t.txt"
    text.write_text("one\ntwo\n")
    assert [b["line"] for b in flumen.Dataset.text_lines(str(text))] == ["one", "two"]


def test_arrow_in_and_out_without_copies():
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"x": pa.array(np.arange(6, dtype=np.float32))})
    ds = flumen.Dataset.from_arrow(table).map({"y": col("x") * 2})
    out = [pa.record_batch(b) for b in ds.batch(3).unbatch().iter(as_batches=True)]
    assert pa.Table.from_batches(out).column("y").to_pylist() == [0, 2, 4, 6, 8, 10]
    # An element of a batched dataset is its batch's rows.
    batch = next(iter(flumen.Dataset.range(4).batch(4).iter(as_batches=True)))
    imported = pa.record_batch(batch)
    assert imported.num_rows == 4
    assert imported.column(0).to_pylist() == [0, 1, 2, 3]


def test_a_checkpoint_resumes_exactly():
    ds = flumen.Dataset.range(100).shuffle(30, seed=1, reshuffle_each_iteration=False).batch(7)
    expected = [b["value"].tolist() for b in ds]
    it = ds.iter()
    before = [next(it)["value"].tolist() for _ in range(4)]
    saved = it.save()
    assert isinstance(saved, bytes)
    rest = [b["value"].tolist() for b in ds.iter(checkpoint=saved)]
    assert before + rest == expected


def test_errors_are_python_exceptions_naming_the_problem(tmp_path):
    with pytest.raises(flumen.PlanError, match="nope"):
        flumen.Dataset.range(3).map({"y": col("nope") + 1})
    with pytest.raises(flumen.Error):
        list(flumen.Dataset.csv(str(tmp_path / "missing.csv")))
    ds = flumen.Dataset.range(-2, 3).map({"y": 10 // col("value")})
    with pytest.raises(flumen.DataError):
        list(ds)


def test_serialize_round_trip_and_fingerprint():
    ds = flumen.Dataset.range(5).map({"y": col("value") + 1}).batch(2)
    again = flumen.Dataset.deserialize(ds.serialize())
    assert again.fingerprint() == ds.fingerprint()
    assert [b["y"].tolist() for b in again] == [[1, 2], [3, 4], [5]]
    assert ("y", "int64", [None]) in ds.element_spec
    assert "batch" in ds.explain()


def test_next_releases_the_gil():
    # A Python thread keeps running while next() waits on a slow pipeline: 2,000,000
    # elements through a map, in one batch.
    ds = flumen.Dataset.range(2_000_000).map({"y": flumen.sqrt(col("value").cast("float64"))}).batch(2_000_000)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    it = iter(ds)
    thread.start()
    start = time.perf_counter()
    next(it)
    end = time.perf_counter()
    stop.set()
    thread.join()
    during = [t for t in ticks if start < t < end]
    assert end - start < 0.05 or len(during) >= 2, f"no ticks in {end - start:.3f} s"


def test_cancel_from_another_thread():
    ds = flumen.Dataset.range(10).repeat().prefetch(2)
    it = ds.iter()
    next(it)
    it.cancel()
    with pytest.raises(flumen.CancelledError):
        next(it)
    # It keeps saying so, rather than ending as if every element had come.
    with pytest.raises(flumen.CancelledError):
        next(it)


def test_python_functions_map_and_filter_elements_or_chunks():
    def double(element):
        assert element["value"].shape == ()  # one element, as tf.data calls it
        return {"y": element["value"] * 2.0}

    ds = (flumen.Dataset.range(10)
          .map(double, output={"y": "float64"}, keep=False)
          .filter(lambda e: e["y"] > 5)
          .batch(4))
    assert [b["y"].tolist() for b in ds] == [[6.0, 8.0, 10.0, 12.0], [14.0, 16.0, 18.0]]
    assert "double" in ds.explain()

    def double_columns(columns):
        assert columns["value"].shape == (10,)  # a chunk's column
        return {"y": columns["value"] * 2.0}

    chunks = (flumen.Dataset.range(10)
              .map(double_columns, output={"y": "float64"}, keep=False, batched=True)
              .filter(lambda c: c["y"] > 5, batched=True)
              .batch(4))
    assert [b["y"].tolist() for b in chunks] == [[6.0, 8.0, 10.0, 12.0], [14.0, 16.0, 18.0]]
    stops = flumen.Dataset.range(10).take_while(lambda e: e["value"] < 3)
    assert [int(e["value"]) for e in stops] == [0, 1, 2]


def test_a_python_exception_is_an_error_with_its_traceback():
    def broken(columns):
        raise KeyError("no such thing")

    ds = flumen.Dataset.range(3).map(broken, output={"y": "int64"})
    with pytest.raises(flumen.UdfError, match="(?s)broken.*KeyError.*no such thing"):
        list(ds)
    wrong = flumen.Dataset.range(3).map(lambda c: {"y": [1]}, output={"y": "int64"}, batched=True)
    with pytest.raises(flumen.UdfError, match="1 values for [23] elements"):
        list(wrong)


def test_from_numpy_and_generators():
    features = np.arange(12, dtype=np.float32).reshape(6, 2)
    ds = flumen.Dataset.from_numpy({"x": features, "label": np.array([0, 1, 0, 1, 0, 1])})
    assert ("x", "float32", [2]) in ds.element_spec
    batches = [b for b in ds.batch(3)]
    assert batches[0]["x"].tolist() == features[:3].tolist()
    assert batches[1]["label"].tolist() == [1, 0, 1]

    def generate():
        for i in range(3):
            yield {"i": [i, i + 10], "name": [f"a{i}", f"b{i}"]}

    gen = flumen.Dataset.from_generator(generate, output={"i": "int64", "name": "string"})
    assert [(int(b["i"]), b["name"]) for b in gen] == [
        (0, "a0"), (10, "b0"), (1, "a1"), (11, "b1"), (2, "a2"), (12, "b2")]
    # Each pass calls the generator again.
    assert len(list(gen)) == 6


def test_a_parallel_python_map_gives_the_sequential_result():
    ds = flumen.Dataset.range(2000).map(
        lambda c: {"y": c["value"] % 7}, output={"y": "int64"}, keep=False, num_parallel_calls=4)
    assert values(ds, "y") == [v % 7 for v in range(2000)]
    # Dropping an iterator in the middle, while workers wait for the GIL, does not hang.
    it = iter(ds)
    next(it)
    del it


def test_tfrecord_examples_parsed_like_tf_data(tmp_path):
    paths = []
    for f in range(2):
        records = [flumen.serialize_example({"x": [float(f * 10 + i), 0.5], "label": [i % 3],
                                             "tokens": list(range(i % 4)), "name": [f"r{f}{i}"]})
                   for i in range(10)]
        path = str(tmp_path / f"part{f}.tfrecord")
        flumen.write_tfrecord(path, records, compression="GZIP" if f else "")
        paths.append(path)
    ds = (flumen.Dataset.list_files(str(tmp_path / "part0.tfrecord"))
          .interleave_files("filename", "tfrecord")
          .parse_example("record", {"x": ("float32", [2]), "label": ("int64", []), "tokens": ("int64", None)}))
    rows = []
    for b in ds:
        assert not b["tokens"].flags.owndata  # one ragged element: a view of its values
        rows.append((b["x"].tolist(), int(b["label"]), b["tokens"].tolist()))
    assert len(rows) == 10
    assert rows[3] == ([3.0, 0.5], 0, [0, 1, 2])
    whole = flumen.Dataset.read_files(paths[0], "tfrecord").parse_example("record", {"tokens": ("int64", None)})
    # A batch of ragged elements: (values, offsets), two views.
    assert sum(len(b["tokens"][0]) for b in whole.batch(4)) == sum(i % 4 for i in range(10))
    gz = flumen.Dataset.tfrecord(paths[1], compression="GZIP").parse_example("record", {"name": ("bytes", [])})
    assert [b["name"] for b in gz][:2] == [b"r10", b"r11"]
    # A file twice through a parallel interleave: every record twice.
    twice = flumen.Dataset.from_numpy({"filename": np.array([paths[0], paths[0]])}).interleave_files(
        "filename", "tfrecord", cycle_length=2, num_parallel_calls=2)
    assert len(list(twice)) == 20


def test_padded_batch_window_bucket_and_zip():
    ds = flumen.Dataset.range(5).map({"n": col("value")})
    zipped = flumen.Dataset.zip([flumen.Dataset.range(3), flumen.Dataset.range(10, 20).map({"w": col("value")}, keep=False)])
    assert [(int(b["value"]), int(b["w"])) for b in zipped] == [(0, 10), (1, 11), (2, 12)]
    windows = [b["value"].tolist() for b in flumen.Dataset.range(7).window(3, shift=2, drop_remainder=True)]
    assert windows == [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    gen = flumen.Dataset.from_generator(
        lambda: iter([{"t": [[1, 2, 3]]}, {"t": [[4]]}, {"t": [[5, 6]]}]),
        output={"t": ("int64", [None])})
    padded = [b["t"] for b in gen.padded_batch(3, padding_values={"t": -1})]
    assert len(padded) == 1
    # Rows of one length after padding: a dense [3, 3] array, as tf.data gives it.
    assert padded[0].tolist() == [[1, 2, 3], [4, -1, -1], [5, 6, -1]]
    bucketed = gen.bucket_by_sequence_length(flumen.length(col("t")), [2], [2, 2])
    sizes = sorted(len(b["t"][1]) - 1 if isinstance(b["t"], tuple) else len(b["t"]) for b in bucketed)
    assert sizes == [1, 2]
    assert ds.cardinality == 5
