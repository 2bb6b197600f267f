"""CPU and wall profiles of Python code: measured shares of known work,
per-thread CPU clocks (an idle thread has no CPU time), wall time, thread
names, labels, spans, and the files read by go tool pprof."""
import os
import subprocess

import pytest

from conftest import BURN, runner

WORKLOAD = BURN + '''
import threading
import contprof

contprof.start(profiles="cpu,wall", service="shares")

def work_60(): burn(5.4)
def work_30(): burn(2.7)
def work_10(): burn(0.9)

@contprof.labels(endpoint="/checkout")
def labelled():
    work_10()

def second():
    contprof.set_span(1234, 99)
    contprof.set_endpoint(99, "GET /items")
    work_30()
    contprof.set_span(0, 0)
    labelled()

def sleeper(stop):
    stop.wait()

stop = threading.Event()
s = threading.Thread(target=sleeper, args=(stop,), name="sleepy")
t = threading.Thread(target=second, name="worker-2")
s.start(); t.start()
work_60()
t.join()
stop.set(); s.join()
contprof.stop()
'''


@pytest.fixture(scope="module")
def shares_run(libdir, tmp_path_factory):
    """One run for the whole module: about 9 s of CPU time. A CPU sample
    lands where the sampler finally got the GIL: behind two threads running
    Python that can take 100 to 360 ms, and the worker's last work_30 ms
    then count as work_10's. With 9 s, one such wait moves a share by at
    most 4 points."""
    return runner(libdir, tmp_path_factory.mktemp("shares"))(WORKLOAD)


def test_cpu_shares_across_two_threads(shares_run):
    samples = shares_run.samples()
    total = {f: sum(s.values.get("cpu-time", 0) for s in samples
                    if f in s.functions())
             for f in ("work_60", "work_30", "work_10")}
    all_three = sum(total.values())
    # 9 s of CPU time, measured from the threads' CPU clocks.
    assert 8.1e9 < all_three < 10.8e9, total
    for f, want in (("work_60", 60), ("work_30", 30), ("work_10", 10)):
        share = 100.0 * total[f] / all_three
        assert abs(share - want) <= 5, (f, share, total)
    # Python frames, leaf first, with file and line.
    s = next(s for s in samples if "work_60" in s.functions()
             and s.values.get("cpu-time", 0) > 0)
    assert s.frames[0][0] == "burn"
    assert s.frames[0][1].endswith("workload.py") and s.frames[0][2] > 0
    assert s.functions().index("burn") < s.functions().index("work_60")


def test_sleeping_thread_has_wall_but_no_cpu(shares_run):
    samples = shares_run.samples()
    sleepy = [s for s in samples if s.labels.get("thread name") == "sleepy"]
    wall = sum(s.values.get("wall-time", 0) for s in sleepy)
    cpu = sum(s.values.get("cpu-time", 0) for s in sleepy)
    assert wall > 5.0e9, wall  # it waited through the whole run (~6 s)
    assert cpu < 0.02e9, cpu  # thread start-up only
    assert any("sleeper" in s.functions() for s in sleepy)
    names = {s.labels.get("thread name") for s in samples}
    assert {"MainThread", "worker-2", "sleepy"} <= names


def test_labels_and_spans_on_the_right_samples(shares_run):
    samples = shares_run.samples()
    cpu = [s for s in samples if s.values.get("cpu-time", 0) > 0]
    tagged = [s for s in cpu if s.labels.get("endpoint") == "/checkout"]
    # Every labelled sample is inside the decorated call (a sample taken
    # just after the push, in the decorator's wrapper, is labelled too),
    # and the labelled CPU time is work_10's.
    assert tagged and all(
        any(f.endswith("wrapper") for f in s.functions())
        for s in tagged), [s.functions() for s in tagged]
    w10 = sum(s.values["cpu-time"] for s in cpu if "work_10" in s.functions())
    tagged_w10 = sum(s.values["cpu-time"] for s in tagged
                     if "work_10" in s.functions())
    assert tagged_w10 >= 0.95 * w10
    assert tagged_w10 >= 0.75 * sum(s.values["cpu-time"] for s in tagged)
    for s in cpu:
        if "work_60" in s.functions():
            assert "endpoint" not in s.labels and "span id" not in s.labels
    # The span is set in second() around work_30 (a sample may land in
    # second() itself, between the calls): its CPU time is work_30's.
    spans = [s for s in cpu if s.labels.get("span id") == 1234]
    assert spans and all("second" in s.functions() and "labelled" not in
                         s.functions() for s in spans), [
                             s.functions() for s in spans]
    w30 = sum(s.values["cpu-time"] for s in spans if "work_30" in
              s.functions())
    assert w30 >= 0.75 * sum(s.values["cpu-time"] for s in spans)
    assert all(s.labels.get("local root span id") == 99 for s in spans)
    assert any(s.labels.get("trace endpoint") == "GET /items" for s in spans)


def test_metadata_and_go_pprof_reads_it(shares_run):
    import pprof
    files = shares_run.files()
    assert files
    p = pprof.read(files[0])
    assert p.comment("runtime") == "cpython"
    assert p.comment("runtime_version") == "3.11.2" or p.comment(
        "runtime_version").startswith("3.")
    assert p.comment("process_id") == str(
        int(os.path.basename(files[0]).split(".")[1]))
    for t in ("cpu-time", "cpu-samples", "wall-time", "wall-samples"):
        assert t in p.sample_types
    env = dict(os.environ, HOME="/tmp", GOCACHE="/tmp/contprof-gocache")
    out = subprocess.run(["go", "tool", "pprof", "-top", files[0]], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "work_60" in out.stdout and "burn" in out.stdout, out.stdout
