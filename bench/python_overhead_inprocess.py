"""In-process paired overhead of the Python profiler at its defaults (cpu,
100 Hz): python_work.py's work runs in one process, in rounds of three
segments (plain, profiled, plain again: an A/A control) whose order
rotates; each segment's process CPU time (time.process_time: every thread,
the sampler and uploader included) and the working thread's own CPU time
are measured around the work only (start and stop are outside). Ratios to
the round's plain segment; median [p25, p75]. Short segments close together
in time see the same machine load, which run-to-run comparisons do not.

    PYTHONPATH=<built package> python3 bench/python_overhead_inprocess.py [ROUNDS WORK]

(bench/python_overhead.sh [PYTHON] builds the package for that interpreter
into $BENCH_BUILD_DIR/python-X.Y.Z.)
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contprof  # noqa: E402
import python_work  # noqa: E402

ROUNDS, WORK = (int(a) for a in (sys.argv[1:] + ["41", "100"])[:2])


def sampler_cpu_s():
    """The CPU time of the contprof-python sampler thread (schedstat)."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                if f.read().strip() != "contprof-python":
                    continue
            with open("/proc/self/task/%s/schedstat" % task) as f:
                return int(f.read().split()[0]) / 1e9
        except OSError:
            pass
    return 0.0


def segment(profiled, out):
    if profiled:
        contprof.start(output_dir=out, upload_period=3600)
    p0, t0, s0 = time.process_time(), time.thread_time(), sampler_cpu_s()
    for _ in range(WORK):
        python_work.deep(12, 4000)
    p1, t1, s1 = time.process_time(), time.thread_time(), sampler_cpu_s()
    if profiled:
        contprof.stop()
    return p1 - p0, t1 - t0, s1 - s0


def quantiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return "%.4f [%.4f, %.4f]" % (statistics.median(xs), q[0], q[2])


def main():
    out = tempfile.mkdtemp(prefix="contprof-inproc.")
    variants = ["plain", "contprof", "plain-again"]
    res = {v: [] for v in variants}
    segment(False, out)
    segment(True, out)  # warm-up
    for r in range(ROUNDS):
        for k in range(3):
            v = variants[(r + k) % 3]
            res[v].append(segment(v == "contprof", out))
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print("in-process: %d rounds x 3 segments of python_work.deep x %d "
          "(~%.2f s CPU each)" % (ROUNDS, WORK,
                                  statistics.median(s[0] for s in
                                                    res["plain"])))
    print("| variant | process CPU / plain | work thread CPU / plain | "
          "sampler thread CPU / plain |")
    print("|---|---|---|---|")
    for v in ("contprof", "plain-again"):
        pr = [a[0] / b[0] for a, b in zip(res[v], res["plain"])]
        tr = [a[1] / b[1] for a, b in zip(res[v], res["plain"])]
        sr = [a[2] / b[0] for a, b in zip(res[v], res["plain"])]
        print("| %s | %s | %s | %s |" % (v, quantiles(pr), quantiles(tr),
                                          quantiles(sr)))


if __name__ == "__main__":
    main()
