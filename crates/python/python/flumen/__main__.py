"""``python -m flumen bench W --data DIR``: see ``flumen.bench``."""

import sys

from flumen import bench

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "bench":
        raise SystemExit("usage: python -m flumen bench W --data DIR [--rounds N]")
    bench.main(sys.argv[2:])
