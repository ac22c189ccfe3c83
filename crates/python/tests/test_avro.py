"""Avro container files from Python. The files are written here by a small encoder of the
test's own (Avro's binary encoding is simple), not by flumen."""

import datetime
import json
import os

import numpy as np

import flumen
from flumen import col

SCHEMA = {
    "type": "record",
    "name": "r",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "label", "type": ["null", "int"]},
        {"name": "f", "type": {"type": "array", "items": "float"}},
        {"name": "name", "type": "string"},
    ],
}


def zigzag(n):
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s):
    b = s.encode() if isinstance(s, str) else s
    return zigzag(len(b)) + b


def record(i):
    label = zigzag(0) if i % 3 == 0 else zigzag(1) + zigzag(i * 10)
    floats = [k + 0.5 for k in range(i % 4)]
    items = (zigzag(len(floats)) + np.array(floats, "<f4").tobytes() if floats else b"") + zigzag(0)
    return zigzag(i) + label + items + string(f"n{i}")


def write(path, rows, per_block):
    sync = os.urandom(16)
    meta = zigzag(1) + string("avro.schema") + string(json.dumps(SCHEMA)) + zigzag(0)
    with open(path, "wb") as f:
        f.write(b"Obj\x01" + meta + sync)
        for start in range(0, rows, per_block):
            block = b"".join(record(i) for i in range(start, min(rows, start + per_block)))
            f.write(zigzag(min(per_block, rows - start)) + zigzag(len(block)) + block + sync)


def test_avro_records_from_python(tmp_path):
    path = str(tmp_path / "a.avro")
    write(path, 40, 7)
    ds = flumen.Dataset.avro(path)
    assert ds.element_spec[0] == ("id", "int64", [])
    rows = list(ds)
    assert [int(r["id"]) for r in rows] == list(range(40))
    assert [r["name"] for r in rows] == [f"n{i}" for i in range(40)]
    assert [r["f"].tolist() for r in rows[:5]] == [[], [0.5], [0.5, 1.5], [0.5, 1.5, 2.5], []]
    # A nullable field: None where the record holds null (lists for nullable columns).
    assert next(iter(ds.batch(3)))["label"] == [None, 10, 20]
    # Projection, and blocks as parallel splits.
    assert [int(r["id"]) for r in flumen.Dataset.avro(path, columns=["id"])] == list(range(40))
    split = flumen.Dataset.read_files(path, "avro", num_parallel_calls=2)
    assert sorted(int(r["id"]) for r in split) == list(range(40))
    assert "avro" in ds.map({"x": col("id") + 1}, keep=False).explain()


def test_avro_feature_specs(tmp_path):
    path = str(tmp_path / "f.avro")
    write(path, 12, 5)
    # Records with i % 4 == 0 have an empty f: a shape of [None] reads every record.
    ds = flumen.Dataset.avro(path, features={"id": "int64", "f": ("float32", [None])})
    assert [r["f"].tolist() for r in ds][:3] == [[], [0.5], [0.5, 1.5]]
    # A fixed shape checks every record's length: most records do not fit [2].
    fixed = flumen.Dataset.avro(path, features={"f": ("float32", [2])})
    try:
        list(fixed)
        raise AssertionError("a record that does not fit its shape must be an error")
    except flumen.DataError as e:
        assert "f.avro" in str(e) and "where its shape says 2" in str(e)


def test_avro_blocks_in_a_seeded_order(tmp_path):
    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"part-{i}.avro"))
        write(paths[-1], 50, 5)
    ids = lambda ds: [int(r["id"]) for r in ds]
    in_order = ids(flumen.Dataset.avro(paths))
    shuffled = flumen.Dataset.avro(paths, shuffle_blocks=True, seed=3)
    first, second = ids(shuffled), ids(shuffled)
    assert sorted(first) == sorted(in_order) == sorted(second)
    assert first != in_order and first != second  # another order each iteration
    assert ids(flumen.Dataset.avro(paths, shuffle_blocks=True, seed=3)) == first
    # Records keep their order within a block of five.
    assert all(first[s + j + 1] == first[s + j] + 1 for s in range(0, 100, 5) for j in range(4))
    assert "blocks in a random order each iteration (seed 3)" in shuffled.explain()


def test_avro_reader_schema_promotes_and_fills_defaults(tmp_path):
    path = str(tmp_path / "a.avro")
    write(path, 12, 5)
    reader = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "ident", "type": "double", "aliases": ["id"]},
            {"name": "label", "type": ["null", "long"]},
            {"name": "weight", "type": "float", "default": 0.25},
        ],
    }
    rows = list(flumen.Dataset.avro(path, reader_schema=json.dumps(reader)))
    assert [float(r["ident"]) for r in rows] == [float(i) for i in range(12)]
    assert [float(r["weight"]) for r in rows] == [0.25] * 12
    assert rows[0]["ident"].dtype == np.float64 and rows[1]["label"].dtype == np.int64


def test_avro_logical_types(tmp_path):
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "clock", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    sync = os.urandom(16)
    meta = zigzag(1) + string("avro.schema") + string(json.dumps(schema)) + zigzag(0)
    block = b"".join(zigzag(1_700_000_000_000 + i) + zigzag(5_000_000 + i) + zigzag(19_000 + i) for i in range(3))
    path = str(tmp_path / "t.avro")
    with open(path, "wb") as f:
        f.write(b"Obj\x01" + meta + sync + zigzag(3) + zigzag(len(block)) + block + sync)
    rows = list(flumen.Dataset.avro(path))
    assert rows[1]["at"] == np.datetime64(1_700_000_000_001_000, "us")
    assert rows[2]["clock"] == np.timedelta64(5_000_002, "us")
    table = next(flumen.Dataset.avro(path).batch(3).iter_arrow())
    assert str(table.schema.field("day").type) == "date32[day]"
    assert table.column("day").to_pylist()[2] == datetime.date(1970, 1, 1) + datetime.timedelta(days=19_002)
