"""Python pipelines serialize to exactly the plans the Rust builders make for the same
pipelines (`tests/python_lowering.rs` at the repository root checks the Rust side against
the same files), so they get every optimizer rewrite and kernel the Rust ones get."""

import json
import pathlib

import pytest

import flumen
from flumen import col, when

PLANS = pathlib.Path(__file__).parent / "plans"


def pipelines():
    arithmetic = flumen.Dataset.range(100).map({"y": col("value") * 2 + 1}).filter(col("y") % 3 != 0).batch(32)
    functions = flumen.Dataset.range(10).map(
        {
            "f": col("value").cast("float32") * 0.5,
            "s": flumen.sqrt(flumen.abs(col("value"))),
            "c": when(col("value") > 5, 1).otherwise(0),
            "k": flumen.clip(col("value"), 2, 7),
            "b": flumen.bucketize(col("value").cast("float64"), [2.0, 4.0]),
            "o": flumen.one_hot(col("value") % 3, 3),
            "p": flumen.power(col("value"), 2),
            "l": (col("value") <= 3) & ((col("value") >= 1) | ~(col("value") == 9)),
        },
        keep=False,
    )
    shuffled = flumen.Dataset.range(1000).shuffle(64, seed=7).repeat(2).take(100).prefetch(flumen.AUTOTUNE)
    examples = (
        flumen.Dataset.tfrecord("examples.tfrecord")
        .parse_example("record", {"label": ("int64", [1]), "tokens": ("int64", None)})
        .padded_batch(8)
    )
    return {
        "arithmetic.json": arithmetic,
        "functions.json": functions,
        "shuffled.json": shuffled,
        "examples.json": examples,
    }


@pytest.mark.parametrize("name", sorted(pipelines()))
def test_python_lowers_to_the_rust_builders_plan(name):
    expected = json.loads((PLANS / name).read_text())
    assert json.loads(pipelines()[name].serialize()) == expected


def test_every_plan_file_has_a_python_pipeline():
    assert sorted(p.name for p in PLANS.glob("*.json")) == sorted(pipelines())
