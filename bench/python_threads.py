"""The Python sampler at its defaults (cpu, 100 Hz) with THREADS threads
running pure Python: CPU overhead against no profiler, and the sampling
latency (a sample due -> that thread's frames read).

In one process, ROUNDS rounds of five segments in rotating order: plain,
profiled (contprof.start before, stop after; both outside the timed part),
profiled with process_vm_readv reads (CONTPROF_PYTHON_READS=syscall),
profiled with native frames (CONTPROF_PYTHON_NATIVE=1), plain again (the
A/A control). Each segment runs the same work in THREADS
threads (bench/python_work.py's round() as many times as WORK). Per
segment the process's CPU time (every thread, so the sampler's and the
uploader's too) is divided by its round's first plain segment; a fifth of
the work runs untimed first in every segment (with the profiler already
started: its first samples name every frame, once per process in a
service). Besides the
ratios, the CPU of the profiler's own threads (every contprof-* thread: the
sampler, the namer, the aggregator, the uploader; from schedstat) divided
by the work's CPU: a direct,
low-noise figure. Latency from the extension's stats() over all profiled
segments. With native frames, the CPU the sampled threads spend in the
signal handler (its own thread CPU clock, from stats()) over the work's.

    PYTHONPATH=<built package> python3 bench/python_threads.py [THREADS ROUNDS WORK]
"""
import glob
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_work  # noqa: E402

import contprof  # noqa: E402
from contprof import _contprof  # noqa: E402

THREADS, ROUNDS, WORK = (int(a) for a in (sys.argv[1:] + ["2", "15", "40"])[:3])
# Every thread of the profiler: the sampler, the namer, the aggregator's
# drain thread, the uploader.
OURS = "contprof-"


def profiler_cpu_ns():
    total = 0
    for task in glob.glob("/proc/self/task/*"):
        try:
            with open(task + "/comm") as f:
                if f.read().startswith(OURS):
                    with open(task + "/schedstat") as f:
                        total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def work(n=None):
    def one():
        for _ in range(n or WORK):
            python_work.deep(12, 4000)
    ts = [threading.Thread(target=one) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def segment(profiled, out, lat, native=False, reads="direct"):
    if profiled:
        contprof.start(output_dir=out, upload_period=3600,
                       python_native=native, python_reads=reads)
    # Untimed, in both: the first samples name every frame (a service pays
    # that once), the threads' first run warms the interpreter.
    work(max(1, WORK // 5))
    p0 = profiler_cpu_ns()
    h0 = _contprof.stats()["native_handler_ns"] if profiled else 0
    c0 = time.process_time()
    work()
    c1 = time.process_time()
    own = 0
    if profiled:
        own = profiler_cpu_ns() - p0
        s = _contprof.stats()
        lat.append((s["latency_p50_us"], s["latency_p99_us"],
                    s["latency_max_us"], s["latency_n"], s["dropped"],
                    s["samples"], s["native_requests"], s["native_merged"],
                    (s["native_handler_ns"] - h0) / 1e9 / (c1 - c0)))
        contprof.stop()
    return c1 - c0, own / 1e9


def main():
    out = tempfile.mkdtemp(prefix="contprof-pythreads.")
    # contprof: the defaults (direct reads); syscall: process_vm_readv reads.
    variants = ["plain", "contprof", "syscall", "native", "plain-again"]
    ratios = {v: [] for v in variants}
    own = {"contprof": [], "syscall": [], "native": []}
    lat = {"contprof": [], "syscall": [], "native": []}
    work()  # warm-up
    for r in range(ROUNDS):
        order = variants[r % 5:] + variants[:r % 5]
        cpu = {}
        for v in order:
            profiled = v in own
            cpu[v], o = segment(profiled, out, lat.get(v), v == "native",
                                "syscall" if v == "syscall" else "direct")
            if profiled:
                own[v].append(o / cpu[v])
        for v in variants:
            ratios[v].append(cpu[v] / cpu["plain"])

    def q(xs):
        xs = sorted(xs)
        return "%.4f [%.4f, %.4f]" % (statistics.median(xs),
                                      xs[len(xs) // 4], xs[3 * len(xs) // 4])
    print("python threads: %d threads, %d rounds, work %d, %s" % (
        THREADS, ROUNDS, WORK, sys.version.split()[0]))
    for v in variants:
        print("  %-12s process CPU / plain %s" % (v, q(ratios[v])))
    print("  syscall / contprof process CPU %s" % q(
        [a / b for a, b in zip(ratios["syscall"], ratios["contprof"])]))
    print("  native / contprof process CPU %s" % q(
        [a / b for a, b in zip(ratios["native"], ratios["contprof"])]))
    for v in own:
        print("  %-8s profiler threads' CPU / work CPU: %s" % (v, q(own[v])))
        p99 = sorted(x[1] for x in lat[v])
        print("  %-8s latency per segment (us): p50 median %d, p99 median "
              "%d, p99 max %d, max %d; samples %d, dropped %d; native "
              "requests %d, merged %d" % (
                  v, statistics.median(x[0] for x in lat[v]),
                  statistics.median(p99), p99[-1],
                  max(x[2] for x in lat[v]), sum(x[5] for x in lat[v]),
                  sum(x[4] for x in lat[v]), sum(x[6] for x in lat[v]),
                  sum(x[7] for x in lat[v])))
    print("  native   signal handlers' CPU / work CPU: %s" % q(
        [x[8] for x in lat["native"]]))


if __name__ == "__main__":
    main()
