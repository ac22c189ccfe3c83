"""flumen's Avro reader against fastavro's, value for value, over generated schemas.

Schemas are drawn at random (seeded): primitives, enums, fixed, arrays, maps, nested records,
nullable fields and logical types; fastavro writes the records with every codec flumen reads;
both libraries read them back, as written and through a reader schema derived from the
writer's (promotions, renamed fields found by alias, dropped fields, added fields with
defaults, enums whose symbols changed, nested records evolved the same way). flumen's
elements (flattened: `record.field`, a map as `map.keys` and `map.values`) are compared with
fastavro's records flattened the same way.
"""

import copy
import datetime
import decimal
import io
import json
import random

import numpy as np
import pytest

import flumen

fastavro = pytest.importorskip("fastavro")
pa = pytest.importorskip("pyarrow")

CODECS = ["null", "deflate", "snappy", "zstandard", "bzip2"]
PRIMITIVES = ["boolean", "int", "long", "float", "double", "string", "bytes"]
LOGICAL = [
    {"type": "int", "logicalType": "date"},
    {"type": "int", "logicalType": "time-millis"},
    {"type": "long", "logicalType": "time-micros"},
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
]


class Names:
    """Fresh names for named types."""

    def __init__(self):
        self.n = 0

    def __call__(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"


def scalar_type(rng, names):
    kind = rng.random()
    if kind < 0.55:
        return rng.choice(PRIMITIVES)
    if kind < 0.75:
        return copy.deepcopy(rng.choice(LOGICAL))
    if kind < 0.9:
        symbols = rng.sample(["A", "B", "C", "D", "E"], rng.randint(1, 4))
        return {"type": "enum", "name": names("E"), "symbols": symbols}
    return {"type": "fixed", "name": names("F"), "size": rng.randint(1, 5)}


def field_type(rng, names, depth):
    kind = rng.random()
    if kind < 0.5:
        t = scalar_type(rng, names)
        return ["null", t] if rng.random() < 0.25 else t
    if kind < 0.65:
        return {"type": "array", "items": scalar_type(rng, names)}
    if kind < 0.8:
        return {"type": "map", "values": rng.choice(["long", "double", "string"])}
    if depth < 2:
        return record(rng, names, depth + 1)
    return scalar_type(rng, names)


def record(rng, names, depth=0):
    count = rng.randint(1, 5)
    return {
        "type": "record",
        "name": names("R"),
        "fields": [{"name": f"f{i}", "type": field_type(rng, names, depth)} for i in range(count)],
    }


def value(rng, t):
    if isinstance(t, list):
        return None if rng.random() < 0.3 else value(rng, t[1])
    if isinstance(t, str):
        return {
            "boolean": lambda: rng.random() < 0.5,
            "int": lambda: rng.randint(-(2**31), 2**31 - 1),
            "long": lambda: rng.randint(-(2**62), 2**62),
            "float": lambda: float(rng.choice([0.5, -2.25, 1e10, 3.0])),
            "double": lambda: rng.uniform(-1e6, 1e6),
            "string": lambda: "".join(rng.choice("abcé字 ") for _ in range(rng.randint(0, 6))),
            "bytes": lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))),
        }[t]()
    logical = t.get("logicalType")
    if logical == "date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(0, 30000))
    if logical == "time-millis":
        return datetime.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999) * 1000)
    if logical == "time-micros":
        return datetime.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999_999))
    if logical in ("timestamp-millis", "timestamp-micros"):
        micros = rng.randint(0, 2_000_000_000_000_000)
        if logical == "timestamp-millis":
            micros -= micros % 1000
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=micros)
    if logical == "decimal":
        return decimal.Decimal(rng.randint(-(10**9) + 1, 10**9 - 1)).scaleb(-2)
    kind = t["type"]
    if kind == "enum":
        return rng.choice(t["symbols"])
    if kind == "fixed":
        return bytes(rng.randrange(256) for _ in range(t["size"]))
    if kind == "array":
        return [value(rng, t["items"]) for _ in range(rng.randint(0, 4))]
    if kind == "map":
        return {f"k{rng.randint(0, 99)}": value(rng, t["values"]) for _ in range(rng.randint(0, 3))}
    return {f["name"]: value(rng, f["type"]) for f in t["fields"]}


def flatten(schema, record_value, prefix=""):
    """A fastavro record as flumen's flattened element: nested records' fields as `a.b`, a
    map as `m.keys` and `m.values`, enums as their symbols."""
    out = {}
    for f in schema["fields"]:
        name, t, v = prefix + f["name"], f["type"], record_value[f["name"]]
        if isinstance(t, dict) and t["type"] == "record":
            out.update(flatten(t, v, name + "."))
        elif isinstance(t, dict) and t["type"] == "map":
            out[name + ".keys"] = list(v.keys())
            out[name + ".values"] = list(v.values())
        else:
            out[name] = v
    return out


def same(got, want):
    """flumen's value against fastavro's. fastavro hands an int or long promoted to `float`
    out as the Python number it read (a double); Avro's specification reads it as a 32-bit
    float, as flumen does, so such a value is compared as that float too."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(got, float) and isinstance(want, (int, float)) and not isinstance(want, bool):
        return got == want or got == float(np.float32(want))
    return got == want


def flumen_rows(path, reader_schema=None):
    ds = flumen.Dataset.avro(path, reader_schema=None if reader_schema is None else json.dumps(reader_schema))
    rows = []
    for batch in ds.batch(16).iter_arrow():
        rows.extend(pa.record_batch(batch).to_pylist())
    return rows


def fastavro_rows(path, reader_schema=None):
    with open(path, "rb") as f:
        return list(fastavro.reader(f, reader_schema=reader_schema))


def evolve(rng, t, names):
    """A reader type for writer type `t`, as Avro's resolution allows (or `t` itself)."""
    if isinstance(t, str):
        promoted = {"int": ["long", "float", "double"], "long": ["float", "double"], "float": ["double"],
                    "string": ["bytes"], "bytes": ["string"]}
        return rng.choice(promoted.get(t, [t]) + [t]) if t != "bytes" else t
    if isinstance(t, list):
        return ["null", evolve(rng, t[1], names)]
    kind = t["type"]
    if kind == "enum" and "logicalType" not in t:
        symbols = [s for s in t["symbols"] if rng.random() < 0.7] or t["symbols"][:1]
        reader = {"type": "enum", "name": t["name"], "symbols": symbols + ["OTHER"], "default": "OTHER"}
        return reader
    if kind == "record":
        return evolve_record(rng, t, names)
    if kind == "array":
        items = t["items"]
        return {"type": "array", "items": evolve(rng, items, names) if isinstance(items, str) else items}
    return t


def evolve_record(rng, schema, names):
    fields = []
    for f in schema["fields"]:
        r = rng.random()
        if r < 0.15 and len(schema["fields"]) > 1:
            continue  # dropped by the reader
        field = {"name": f["name"], "type": evolve(rng, f["type"], names)}
        if r > 0.85:
            field = {"name": f["name"] + "_renamed", "aliases": [f["name"]], "type": field["type"]}
        fields.append(field)
    # A field only the reader has, filled from its default.
    default = rng.choice([("long", 7), ("string", "none"), ({"type": "array", "items": "int"}, [1, 2]),
                          ({"type": "map", "values": "long"}, {"x": 1})])
    fields.append({"name": "added", "type": default[0], "default": default[1]})
    return {"type": "record", "name": schema["name"], "fields": fields}


def compare(writer_schema, reader_schema, got, want, where):
    shown = reader_schema or writer_schema
    assert len(got) == len(want), where
    for i, (g, w) in enumerate(zip(got, want)):
        w = flatten(shown, w)
        assert list(g) == list(w), f"{where}: fields of record {i}"
        for name in w:
            assert same(g[name], w[name]), f"{where}: record {i} field {name}: {g[name]!r} vs {w[name]!r}"


@pytest.mark.parametrize("seed", range(24))
def test_generated_schemas_read_as_fastavro_reads_them(tmp_path, seed):
    rng = random.Random(seed)
    names = Names()
    schema = record(rng, names)
    records = [value(rng, schema) for _ in range(rng.randint(1, 40))]
    codec = CODECS[seed % len(CODECS)]
    path = str(tmp_path / f"{seed}.avro")
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(copy.deepcopy(schema)), records, codec=codec, sync_interval=256)
    compare(schema, None, flumen_rows(path), fastavro_rows(path), f"seed {seed} ({codec}), as written")
    reader = evolve_record(rng, schema, names)
    want = fastavro_rows(path, fastavro.parse_schema(copy.deepcopy(reader)))
    compare(schema, reader, flumen_rows(path, reader), want, f"seed {seed} ({codec}), read as {json.dumps(reader)}")


def test_an_enum_symbol_the_reader_lacks_without_a_default_fails_its_record(tmp_path):
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"}, {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B", "C"]}}]}
    path = str(tmp_path / "e.avro")
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), [{"id": i, "kind": "ABC"[i]} for i in range(3)])
    reader = copy.deepcopy(schema)
    reader["fields"][1]["type"]["symbols"] = ["A", "B"]
    with pytest.raises(Exception):
        fastavro_rows(path, fastavro.parse_schema(copy.deepcopy(reader)))
    ds = flumen.Dataset.avro(path, reader_schema=json.dumps(reader))
    it = iter(ds)
    assert [next(it)["kind"] for _ in range(2)] == ["A", "B"]
    with pytest.raises(flumen.DataError, match='"C"'):
        next(it)
