"""flumen on Ray against Ray Data's own pipelines, on the reference workloads w2 (TFRecord of
tf.train.Example: parse, scale, filter, batches of 256) and w7 (JPEG files: decode, random
resized crop to 224, flip, normalize, batches of 32), same Ray cluster, same files, rounds
alternating; plus what running on Ray costs against flumen in-process (w2), and one against two
simulated one-CPU nodes (w7).

    python crates/python/benches/ray_workloads.py DATA_DIR [--rounds 3] [--parts compare overhead scaling]

DATA_DIR holds ``tfrecord_example/*.tfrecord`` (``flumen gen-data DIR`` writes them) and
``jpeg_files/class_*/*.jpg`` (JPEG files in ImageFolder layout: any will do; the figures in
docs/performance-notes.md used 5,000 of 320..640 x 240..480 pixels). Needs the package as a
release build, ``ray[data]`` and Pillow; Ray's ``read_tfrecords`` also needs TensorFlow.
Prints one JSON line per measurement and a table.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import flumen  # noqa: E402
from flumen import col  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# ----- the workloads written in flumen -----


def flumen_w2(data):
    paths = sorted(glob.glob(f"{data}/tfrecord_example/*.tfrecord"))
    features = {"features": ("float32", [64]), "label": ("int64", []), "id": ("int64", []), "weight": ("float32", [])}
    ds = (flumen.Dataset.read_files(paths, "tfrecord", cycle_length=8, num_parallel_calls=flumen.AUTOTUNE)
          .parse_example("record", features)
          .map({"features": col("features") * col("weight"), "label": col("label"), "id": col("id")}, keep=False)
          .filter(col("label") < 8))
    return ds


def flumen_w7(data, limit=None):
    image = flumen.decode_jpeg(flumen.read_file(col("filename")))
    image = flumen.random_resized_crop(image, (224, 224), seed=7)
    image = flumen.normalize(flumen.convert_image_dtype(flumen.random_flip_left_right(image, seed=7)), MEAN, STD)
    if limit is None:
        files = flumen.Dataset.list_files(f"{data}/jpeg_files/*/*.jpg", shuffle=True, seed=7)
    else:  # the first files, listed as list_files would (a take would shard the output)
        import pyarrow as pa

        names = sorted(glob.glob(f"{data}/jpeg_files/*/*.jpg"))[:limit]
        files = flumen.Dataset.from_arrow(pa.table({"filename": names})).shuffle(limit, seed=7)
    return files.map({"image": image}, keep=False, num_parallel_calls=flumen.AUTOTUNE)


# ----- the same work in Ray Data alone -----


def native_w2(ray, data):
    ds = ray.data.read_tfrecords(f"{data}/tfrecord_example")

    def scale(batch):
        features = batch["features"]
        if features.dtype == object:
            features = np.stack(features)
        weight = np.asarray(batch["weight"], np.float32).reshape(-1)
        label = np.asarray(batch["label"]).reshape(-1)
        keep = label < 8
        return {"features": (features.astype(np.float32) * weight[:, None])[keep], "label": label[keep]}

    return ds.map_batches(scale, batch_format="numpy")


def native_w7(ray, data, limit=None):
    from PIL import Image

    files = sorted(glob.glob(f"{data}/jpeg_files/*/*.jpg"))[:limit]
    mean, std = np.array(MEAN, np.float32), np.array(STD, np.float32)

    def augment(row):
        rng = np.random.default_rng(abs(hash(row["path"])) % (1 << 32))
        img = row["image"]
        h, w = img.shape[:2]
        for _ in range(10):  # torchvision's RandomResizedCrop(224), then its central fallback
            area = h * w * rng.uniform(0.08, 1.0)
            ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw, ch = int(round(np.sqrt(area * ratio))), int(round(np.sqrt(area / ratio)))
            if 0 < cw <= w and 0 < ch <= h:
                top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
                break
        else:
            ch = cw = min(h, w)
            top, left = (h - ch) // 2, (w - cw) // 2
        crop = Image.fromarray(img[top:top + ch, left:left + cw]).resize((224, 224), Image.BILINEAR)
        out = np.asarray(crop, np.float32) / 255.0
        if rng.random() < 0.5:
            out = out[:, ::-1]
        return {"image": (out - mean) / std}

    return ray.data.read_images(files, mode="RGB", include_paths=True).map(augment)


# ----- consumers -----


def consume(ray_dataset, batch_size, field):
    """Rows/s through ``iter_batches`` (numpy), and a checksum of the first value of each row."""
    start = time.perf_counter()
    rows, checksum = 0, 0.0
    for batch in ray_dataset.iter_batches(batch_size=batch_size, batch_format="numpy"):
        values = batch[field]
        rows += len(values)
        checksum += float(np.asarray(values).reshape(len(values), -1)[:, 0].sum())
    return rows, time.perf_counter() - start, checksum


def consume_in_process(ds, batch_size, field):
    start = time.perf_counter()
    rows, checksum = 0, 0.0
    for batch in ds.batch(batch_size).prefetch(flumen.AUTOTUNE):
        values = batch[field]
        rows += len(values)
        checksum += float(values.reshape(len(values), -1)[:, 0].sum())
    return rows, time.perf_counter() - start, checksum


def report(name, rows, seconds, checksum, **extra):
    line = {"measure": name, "rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1),
            "checksum": round(checksum, 3), **extra}
    print(json.dumps(line), flush=True)
    return line


def init_ray(ray, **kwargs):
    ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", **kwargs)
    ray.data.DataContext.get_current().enable_progress_bars = False
    # A session's first Ray Data execution starts its executor and statistics actor (about a
    # second here): paid once per session, by neither side of a comparison.
    ray.data.range(1).take_all()


def compare(ray, data, rounds, workloads):
    """flumen.ray.read against Ray Data's pipeline, on one cluster of this machine's CPUs."""
    import flumen.ray

    init_ray(ray, num_cpus=os.cpu_count())
    table = {}
    for w in workloads:
        size, field = (256, "features") if w == "w2" else (32, "image")
        ours, theirs = [], []
        for _ in range(rounds):
            pipeline = flumen_w2(data) if w == "w2" else flumen_w7(data)
            ours.append(report(f"{w} flumen.ray.read", *consume(flumen.ray.read(pipeline), size, field)))
            native = native_w2(ray, data) if w == "w2" else native_w7(ray, data)
            theirs.append(report(f"{w} Ray Data", *consume(native, size, field)))
        table[w] = ratios(ours, theirs)
    ray.shutdown()
    return table


def overhead(ray, data, rounds, epochs):
    """w2 (``epochs`` passes) through one Ray read task against the same pipeline iterated in
    this process, both consumed in batches of 256."""
    import flumen.ray

    init_ray(ray, num_cpus=os.cpu_count())
    on_ray, in_process = [], []
    for _ in range(rounds):
        ds = flumen_w2(data).repeat(epochs)
        on_ray.append(report(f"w2 x{epochs} flumen.ray.read, 1 task",
                             *consume(flumen.ray.read(ds, parallelism=1), 256, "features")))
        in_process.append(report(f"w2 x{epochs} flumen in-process", *consume_in_process(ds, 256, "features")))
    ray.shutdown()
    return ratios(on_ray, in_process)


def scaling(ray, data, rounds, limit=2000):
    """w7 (first ``limit`` files) on one and on two simulated nodes of one CPU each; flumen
    runs one thread per task so that a node's CPU is all it uses."""
    from ray.cluster_utils import Cluster

    import flumen.ray

    results = {}
    for nodes in (1, 2):
        # cluster_utils gives test nodes a small object store; w7's blocks would spill to disk.
        node = {"num_cpus": 1, "object_store_memory": 2 << 30}
        cluster = Cluster(initialize_head=True, head_node_args=node)
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        init_ray(ray, address=cluster.address)
        results[nodes] = [report(f"w7 on {nodes} node(s)", *consume(
            flumen.ray.read(flumen_w7(data, limit), parallelism=4 * nodes, options={"threads": 1}), 32, "image"))
            for _ in range(rounds)]
        ray.shutdown()
        cluster.shutdown()
    return ratios(results[2], results[1])


def ratios(a, b):
    """Median rows/s of ``a`` and ``b`` and the median per-round ratio a/b."""
    return {"a_rows_per_s": statistics.median(r["rows_per_s"] for r in a),
            "b_rows_per_s": statistics.median(r["rows_per_s"] for r in b),
            "ratio": statistics.median(x["rows_per_s"] / y["rows_per_s"] for x, y in zip(a, b))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", nargs="*", default=["w2", "w7"])
    ap.add_argument("--parts", nargs="*", default=["compare", "overhead", "scaling"])
    a = ap.parse_args()
    import ray
    import ray.data

    summary = {}
    if "compare" in a.parts:
        for w, r in compare(ray, a.data, a.rounds, a.workloads).items():
            summary[f"{w}: flumen.ray.read / Ray Data"] = r
    if "overhead" in a.parts:
        for epochs in (1, 10):
            summary[f"w2 x{epochs}: flumen on Ray (1 task) / in-process"] = overhead(ray, a.data, a.rounds, epochs)
    if "scaling" in a.parts:
        summary["w7: 2 nodes / 1 node"] = scaling(ray, a.data, a.rounds)
    print(f"{'measure':44} {'rows/s':>12} {'vs rows/s':>12} {'ratio':>7}")
    for name, r in summary.items():
        print(f"{name:44} {r['a_rows_per_s']:12.0f} {r['b_rows_per_s']:12.0f} {r['ratio']:7.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
