"""What the Python layer costs: a Python function's map against the same map as an
expression, and one `next()`. Medians of alternating rounds; run with the package installed
as a release build (`maturin develop --release` or `pip install ./crates/python`):

    python crates/python/benches/overhead.py [ROUNDS]
"""

import statistics
import sys
import time

import flumen
from flumen import col

ROWS = 4_000_000


def expression_map():
    return flumen.Dataset.range(ROWS).batch(1024, drop_remainder=True).map({"y": col("value") * 2}, keep=False)


def python_map():
    return flumen.Dataset.range(ROWS).batch(1024, drop_remainder=True).map(
        lambda c: {"y": c["value"] * 2}, output={"y": ("int64", [1024])}, keep=False
    )


def rows_per_second(make):
    start = time.perf_counter()
    rows = sum(b["y"].size for b in make())
    return rows / (time.perf_counter() - start)


def microseconds_per_next(batches, as_batches):
    it = flumen.Dataset.range(batches * 16).batch(16).iter(as_batches=as_batches)
    start = time.perf_counter()
    for _ in it:
        pass
    return (time.perf_counter() - start) / batches * 1e6


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs = {"expr": [], "python": [], "batch": [], "numpy": []}
    for _ in range(rounds):
        runs["expr"].append(rows_per_second(expression_map))
        runs["python"].append(rows_per_second(python_map))
        runs["batch"].append(microseconds_per_next(200_000, True))
        runs["numpy"].append(microseconds_per_next(200_000, False))
    m = {k: statistics.median(v) for k, v in runs.items()}
    print(f"map at batch 1024: expression {m['expr'] / 1e6:.1f} M rows/s, Python function "
          f"{m['python'] / 1e6:.1f} M rows/s: {m['python'] / m['expr']:.2f} of the expression's")
    print(f"next(): {m['batch']:.2f} us handing out a Batch, {m['numpy']:.2f} us a dict of NumPy views "
          "(range().batch(16), the pipeline's work included)")


if __name__ == "__main__":
    main()
