"""The reference workloads of the bench harness, built through the Python API and consumed
as NumPy: ``python -m flumen bench W --data DIR`` prints the JSON line ``compare.py`` reads,
so ``compare.py --engine 'python -m flumen bench {w} --data {data}'`` times the Python layer
against tf.data, and against ``flumen bench`` (the same pipelines in Rust).

The pipelines are those of ``flumen bench`` (``crates/cli/src/bench.rs``), written per
element as a tf.data user writes them; the consumer reduces each batch to the checksum.
"""

import argparse
import glob
import json
import os
import resource
import time

# flumen does no linear algebra; NumPy's OpenBLAS starts a thread per core at import, which
# spins for its first tenth of a second or so, taking a core from a pass of w2 or w4 (tens
# of milliseconds) in a fresh process. One BLAS thread keeps the pass's figure about flumen.
# An explicit OPENBLAS_NUM_THREADS wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402 - after the BLAS setting

import flumen
from flumen import col, lit


def _files(data, folder, extension):
    found = sorted(glob.glob(os.path.join(data, folder, f"*.{extension}")))
    if not found:
        raise SystemExit(f"no .{extension} files in {os.path.join(data, folder)}")
    return found


def w1(data):
    """CSV → x_j, cross, label → filter → shuffle(10000, 42) → batch(1024); Σ cross."""
    fields = {f"x{j}": (col(f"f{j}") - 0.5 * j) / (1.0 + 0.1 * j) for j in range(16)}
    fields.update(cross=col("f0") * col("f1"), label=col("label"))
    ds = (flumen.Dataset.read_files(_files(data, "csv_tabular", "csv"), "csv", cycle_length=4)
          .map(fields, keep=False)
          .filter((col("x0") > -1.5) & (col("label") != lit(9)))
          .shuffle(10_000, seed=42)
          .batch(1024)
          .prefetch(flumen.AUTOTUNE))
    return ds, lambda b: float(b["cross"].sum())


def w2(data):
    """TFRecord → parse_example → features × weight → filter(label < 8) → batch(256); Σ features[:, 0]."""
    features = {"features": ("float32", [64]), "label": ("int64", []), "id": ("int64", []),
                "weight": ("float32", [])}
    ds = (flumen.Dataset.read_files(_files(data, "tfrecord_example", "tfrecord"), "tfrecord", cycle_length=8)
          .parse_example("record", features)
          .map({"features": col("features") * col("weight"), "label": col("label"), "id": col("id")}, keep=False)
          .filter(col("label") < 8)
          .batch(256, drop_remainder=True)
          .prefetch(flumen.AUTOTUNE))
    return ds, lambda b: float(b["features"][:, 0].sum(dtype=np.float64))


# w3's features as AvroTensorDataset's `features=` spec gives them.
W3_FEATURES = {"label": "int64", "weight": "float32", "age": "int32", "score": "float64", "flag": "bool",
               "dense_f": ("float32", [128]), "emb2d": ("float32", [4, 16]),
               "sparse_f": ("float32", [50001], "sparse"), "tokens": ("int64", [None])}


def w3(data):
    """Avro (deflate) read with feature specs → batch(1024); Σ dense_f[:, 0]."""
    ds = flumen.Dataset.avro(_files(data, "avro_atds", "avro"), features=W3_FEATURES).batch(1024)
    return ds, lambda b: float(b["dense_f"][:, 0].sum(dtype=np.float64))


def w4(_data):
    """range(2,000,000) → a chain of expression maps and a filter → batch(4096); Σ v."""
    ds = (flumen.Dataset.range(2_000_000)
          .map({"v": (col("value") * 3 + 1).cast("float64")}, keep=False)
          .map({"v": flumen.sqrt(col("v")) * 0.5}, keep=False)
          .filter(flumen.func("floor", [col("v")]) % 3.0 != 0.0)
          .map({"v": col("v") * col("v") + 1.0}, keep=False)
          .batch(4096))
    return ds, lambda b: float(b["v"].sum())


def w6(data):
    """TFRecord → parse tokens → filter(len ≥ 8) → bucket_by_sequence_length; non-zero tokens."""
    ds = (flumen.Dataset.read_files(_files(data, "tfrecord_text", "tfrecord"), "tfrecord", cycle_length=4)
          .parse_example("record", {"tokens": ("int64", None), "label": ("int64", [])})
          .filter(flumen.length(col("tokens")) >= 8)
          .bucket_by_sequence_length(flumen.length(col("tokens")), [32, 64, 128], [128, 64, 32, 16],
                                     padding_values={"tokens": 0})
          .prefetch(flumen.AUTOTUNE))

    def non_zero(b):
        tokens = b["tokens"]
        values = tokens[0][tokens[1][0]:tokens[1][-1]] if isinstance(tokens, tuple) else tokens
        return float(np.count_nonzero(values))

    return ds, non_zero


WORKLOADS = {"w1": w1, "w2": w2, "w3": w3, "w4": w4, "w6": w6}


def run(workload, data):
    """One pass of `workload` over `data`: the JSON line's fields."""
    start = time.perf_counter()
    ds, reduce = WORKLOADS[workload](data)
    rows = batches = 0
    checksum = 0.0
    field = {"w1": "cross", "w2": "features", "w3": "label", "w4": "v", "w6": "tokens"}[workload]
    for batch in ds:
        checksum += reduce(batch)
        column = batch[field]
        rows += len(column[1]) - 1 if isinstance(column, tuple) else len(column)
        batches += 1
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"engine": "flumen-python", "workload": workload, "variant": "python", "rows": rows,
            "batches": batches, "seconds": seconds, "rows_per_s": rows / seconds, "checksum": checksum,
            "peak_rss_mb": peak_kib * 1024 / 1e6}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m flumen bench")
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--data", default="")
    ap.add_argument("--rounds", type=int, default=1, help="passes; one JSON line each")
    a = ap.parse_args(argv)
    for _ in range(a.rounds):
        print(json.dumps(run(a.workload, a.data)), flush=True)
