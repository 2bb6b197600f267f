"""The Python sampler's own cost per pass: THREADS threads (default 8) sit
DEPTH (default 30) Python frames deep, half burning CPU and half sleeping,
while the sampler runs at 1000 Hz with cpu and wall for SECONDS (default 4);
then the sampler thread's CPU time (contprof-python, from schedstat) is
divided by its passes and by the thread stacks it read.

    PYTHONPATH=<built package> python3 bench/python_sample_cost.py [THREADS DEPTH SECONDS]

(bench/python_overhead.sh [PYTHON] builds the package for that interpreter
into $BENCH_BUILD_DIR/python-X.Y.Z.)
"""
import glob
import os
import sys
import tempfile
import threading
import time

import contprof

THREADS, DEPTH, SECONDS = (int(a) for a in (sys.argv[1:] + ["8", "30", "4"])[:3])


def sampler_cpu_ns():
    for task in glob.glob("/proc/self/task/*"):
        try:
            with open(task + "/comm") as f:
                if f.read().strip() == "contprof-python":
                    with open(task + "/schedstat") as f:
                        return int(f.read().split()[0])
        except OSError:
            pass
    return 0


def nest(depth, fn):
    return nest(depth - 1, fn) if depth else fn()


def spin(stop):
    while not stop.is_set():
        sum(range(1000))


def main():
    out = tempfile.mkdtemp(prefix="contprof-cost.")
    stop = threading.Event()
    threads = [threading.Thread(target=nest, args=(
        DEPTH, (lambda: spin(stop)) if i % 2 else stop.wait))
        for i in range(THREADS)]
    for t in threads:
        t.start()
    contprof.start(profiles="cpu,wall", cpu_hz=1000, wall_interval_ms=1,
                   output_dir=out, upload_period=3600)
    time.sleep(0.5)
    a, t0 = sampler_cpu_ns(), time.monotonic()
    time.sleep(SECONDS)
    b, t1 = sampler_cpu_ns(), time.monotonic()
    stop.set()
    for t in threads:
        t.join()
    contprof.stop()
    passes = None
    # The wall samples of the sleeping threads: one per pass each.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..",
                                    "bindings", "python", "tests"))
    import pprof
    n_wall = 0
    for f in glob.glob(out + "/*.pb.gz"):
        n_wall += sum(s.values.get("wall-samples", 0)
                      for s in pprof.read(f).samples
                      if "nest" in s.functions())
    total = (t1 - t0) + 0.5  # the profile covers start to stop, roughly
    passes = n_wall / THREADS
    per_pass = (b - a) / ((t1 - t0) / total * passes)
    print("threads %d depth %d: %.0f passes/s, sampler CPU %.1f us per pass, "
          "%.2f us per thread stack (%d frames)" % (
              THREADS, DEPTH, passes / total, per_pass / 1e3,
              per_pass / 1e3 / (THREADS + 1), DEPTH + 3))


if __name__ == "__main__":
    main()
