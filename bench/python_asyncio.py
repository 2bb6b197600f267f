"""In-process paired cost of labels that follow asyncio tasks: many tiny
tasks (each awaits sleep(0) AWAITS times, default 2; with LABELS=1 each also runs inside its
own contprof.labels block, one of 8 endpoints), in rounds of three segments
whose order rotates:

  plain      no profiler
  profiled   contprof at its defaults (cpu, 100 Hz): asyncio's
             Handle._run wrapped, the thread's labels switched around every
             callback, task names as labels
  unwrapped  the profiler running, Handle._run left as asyncio's (labels
             follow the thread): what the wrapper alone costs

Each segment's process CPU (time.process_time: every thread, the sampler
included) is measured around the event loop's work only (start, stop and
the loop's creation are outside). Reported: the CPU per asyncio callback of
each mode (callbacks counted once, before the rounds), and per round the
ratios profiled / plain and profiled / unwrapped; median [p25, p75].

    PYTHONPATH=<built package> python3 bench/python_asyncio.py [ROUNDS TASKS LABELS AWAITS]
"""
import asyncio
import asyncio.events
import os
import statistics
import sys
import tempfile
import time

import contprof
from contprof import _tasks

ROUNDS, TASKS, LABELS, AWAITS = (
    int(a) for a in (sys.argv[1:] + ["21", "20000", "0", "2"])[:4])
ENDPOINTS = ["/e%d" % i for i in range(8)]


async def tiny(i):
    for _ in range(AWAITS):
        await asyncio.sleep(0)
    return i


async def tiny_labeled(i):
    with contprof.labels(endpoint=ENDPOINTS[i % 8]):
        for _ in range(AWAITS):
            await asyncio.sleep(0)
    return i


async def work():
    fn = tiny_labeled if LABELS else tiny
    for start in range(0, TASKS, 1000):
        await asyncio.gather(*(fn(i) for i in range(start, start + 1000)))


def count_callbacks():
    handle = asyncio.events.Handle
    run = handle._run
    n = [0]

    def counting(self):
        n[0] += 1
        return run(self)

    handle._run = counting
    try:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(work())
        loop.close()
    finally:
        handle._run = run
    return n[0]


def segment(mode, out):
    if mode != "plain":
        contprof.start(output_dir=out, upload_period=3600)
        if mode == "unwrapped":
            _tasks.uninstall()
        elif _tasks._wrapped is None:
            raise SystemExit("the wrapper is not installed")
    loop = asyncio.new_event_loop()
    p0 = time.process_time()
    loop.run_until_complete(work())
    p1 = time.process_time()
    loop.close()
    if mode != "plain":
        contprof.stop()
    return p1 - p0


def quantiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return "%.4f [%.4f, %.4f]" % (statistics.median(xs), q[0], q[2])


def main():
    out = tempfile.mkdtemp(prefix="contprof-asyncio.")
    callbacks = count_callbacks()
    modes = ["plain", "profiled", "unwrapped"]
    cpu = {m: [] for m in modes}
    for r in range(ROUNDS):
        order = modes[r % 3:] + modes[:r % 3]
        for m in order:
            cpu[m].append(segment(m, out))
    print("python %s, %d tasks%s awaiting %d times, %d callbacks per segment, %d rounds, "
          "load average %s" % (
              sys.version.split()[0], TASKS, " in labels blocks" if LABELS
              else "", AWAITS, callbacks, ROUNDS,
              " ".join("%.2f" % x for x in os.getloadavg())))
    for m in modes:
        print("%-10s CPU per callback: %s us" % (m, quantiles(
            [x / callbacks * 1e6 for x in cpu[m]])))
    print("profiled / plain:     %s" % quantiles(
        [p / q for p, q in zip(cpu["profiled"], cpu["plain"])]))
    print("profiled / unwrapped: %s" % quantiles(
        [p / q for p, q in zip(cpu["profiled"], cpu["unwrapped"])]))
    print("profiled - unwrapped per callback: %s us" % quantiles(
        [(p - q) / callbacks * 1e6
         for p, q in zip(cpu["profiled"], cpu["unwrapped"])]))


if __name__ == "__main__":
    main()
