"""Sampling without the GIL: CPU time spent inside a long C call that holds
the GIL (sorted()) is charged to the Python function that made it, and
stacks read while they change (threads exiting, deep recursion, fork) give
dropped, counted samples, never a crash."""
import json
import platform
import sys

import pytest

from conftest import runner

# A worker alternates sorted() of 400k floats (about 60-100 ms holding the
# GIL) with pure Python; a second thread spins in pure Python. The truth is
# the worker's own CPU clock around each sorted() call.
GIL_BOUND = '''
import json, random, threading, time
import contprof

contprof.start(profiles="cpu", cpu_hz=1000)
DATA = [random.random() for _ in range(400000)]

def sort_part():
    t0 = time.thread_time()
    sorted(DATA)
    return time.thread_time() - t0

def python_part(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i
    return x

truth = {}
def worker():
    t0 = time.thread_time()
    in_sort = 0.0
    while time.thread_time() - t0 < SECONDS:
        in_sort += sort_part()
        python_part(0.07)
    truth.update(sort=in_sort, total=time.thread_time() - t0)

stop = threading.Event()
def spinner():
    x = 0
    while not stop.is_set():
        for i in range(200):
            x += i

s = threading.Thread(target=spinner, name="spinner")
w = threading.Thread(target=worker, name="worker")
s.start(); w.start(); w.join()
stop.set(); s.join()
contprof.stop()
print(json.dumps(truth))
'''


def gil_bound_share(run_py, seconds):
    run = run_py(GIL_BOUND.replace("SECONDS", str(seconds)), timeout=300)
    truth = json.loads(run.proc.stdout.strip().splitlines()[-1])
    worker = [s for s in run.samples()
              if s.labels.get("thread name") == "worker"]
    total = sum(s.values.get("cpu-time", 0) for s in worker)
    in_sort = sum(s.values.get("cpu-time", 0) for s in worker
                  if "sort_part" in s.functions())
    n = sum(s.values.get("cpu-samples", 0) for s in worker)
    want = 100.0 * truth["sort"] / truth["total"]
    got = 100.0 * in_sort / total
    return want, got, n, run


def test_gil_bound_call_charged_to_its_caller(run_py):
    """Measured before this change (the sampler took the GIL) on Debian's
    3.11.2: sort_part got 30-40 points less than its truth. Here within 4
    points of the worker's CPU; with about 6000 worker samples the
    standard error of a share near 50% is 0.65 points, so 4 points is six
    of them."""
    want, got, n, run = gil_bound_share(run_py, 8)
    assert abs(got - want) <= 4, (want, got, n, run.proc.stderr)
    assert n > 2500, n


# Stacks that change under the sampler: no crash, no frame that was not
# there, and what was dropped is counted (stats() and a "[dropped: ...]"
# frame carrying the time).
CHURN = """
import json, os, sys, threading, time
import contprof
from contprof import _contprof

contprof.start(profiles="cpu,wall", cpu_hz=1000, wall_interval_ms=1,
               max_frames=1024)

def rec(d, leaf=50):
    return rec(d - 1, leaf) if d else sum(range(leaf))

def recurser(stop):
    # A chain of up to 900 frames pushed and popped over and over; each leaf
    # stands still for about 2 ms so that some samples find a deep stack
    # whole (reading 900 frame objects one by one takes about a millisecond
    # on 3.8-3.10: with a 1 us leaf, a 3.10 run once read none of them whole
    # and dropped 3502 of 8441 samples).
    while not stop.is_set():
        for d in (10, 300, 900, 50):
            rec(d, 80000)

def short_lived(i):
    rec(20 + i % 40)

stop = threading.Event()
r = threading.Thread(target=recurser, args=(stop,), name="recurser")
r.start()
end = time.monotonic() + 4
n = 0
while time.monotonic() < end:
    # Threads that exit while the sampler may be reading their state.
    batch = [threading.Thread(target=short_lived, args=(i,))
             for i in range(8)]
    for t in batch:
        t.start()
    for t in batch:
        t.join()
    n += len(batch)
    if FORK and n % 80 == 0:
        pid = os.fork()
        if pid == 0:
            rec(100)
            contprof.stop()
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 7, status
stop.set(); r.join()
stats = _contprof.stats()
contprof.stop()

# Every function this program could be in: the names of all code objects
# of the loaded modules, nested ones included.
names = set()
def collect(code):
    names.add(code.co_name)
    names.add(getattr(code, "co_qualname", code.co_name))
    for c in code.co_consts:
        if type(c) is type(code):
            collect(c)
# A class body runs as a code object of the class's name, gone once the
# class is made: a module imported while the program ran (3.13's fork
# warning imports tokenize through linecache) ran such bodies, so every
# class's name counts too.
for m in list(sys.modules.values()):
    for v in list(getattr(m, "__dict__", {}).values()):
        if isinstance(v, type):
            names.add(v.__name__)
            names.add(v.__qualname__)
        for f in [v] + list(getattr(v, "__dict__", {}).values()):
            if isinstance(f, type):
                names.add(f.__name__)
                names.add(f.__qualname__)
            f = getattr(f, "__func__", f)
            f = getattr(f, "fget", f)
            code = getattr(f, "__code__", None)
            if type(code) is type(rec.__code__):
                collect(code)
collect(rec.__code__)
print(json.dumps(dict(stats, threads=n, names=sorted(names))))
"""

SPECIAL = {"[truncated]", "[dropped: Python stack changed while read]",
           "<module>"}


def churn(run_py, fork):
    run = run_py(CHURN.replace("FORK", str(fork)), timeout=300)
    stats = json.loads(run.proc.stdout.strip().splitlines()[-1])
    names = set()
    for s in run.samples():
        names.update(s.functions())
    # Frames the program never had: none (a torn stack is dropped).
    unknown = names - set(stats.pop("names")) - SPECIAL
    assert not unknown, (unknown, stats)
    return stats, names, run


def test_threads_exiting_and_deep_pushes_while_sampled(run_py):
    """Threads exit and a 900-frame chain is pushed and popped while the
    sampler reads them without the GIL: the run ends normally, every frame
    in the profile is one the program has, deep stacks are read whole."""
    stats, names, run = churn(run_py, False)
    assert stats["threads"] > 100, stats
    assert stats["samples"] > 1000, stats
    # Counted (usually a few dozen of several thousand).
    assert stats["dropped"] < stats["samples"], stats
    deep = [s for s in run.samples()
            if s.labels.get("thread name") == "recurser"
            and s.functions().count("rec") >= 800]
    assert deep, stats


def test_fork_in_a_busy_process(run_py):
    """os.fork while the sampler reads other threads: parent and children
    exit normally (the children with their own status)."""
    stats, names, run = churn(run_py, True)
    assert stats["samples"] > 1000, stats


def test_layout_is_checked_and_read_without_the_gil(run_py):
    """The layout passed its check on our own stack; frames are read without
    the GIL; from 3.13 on the offsets come from the interpreter's
    _PyRuntime.debug_offsets, not from this build's headers."""
    run = run_py("""
        import json, contprof
        from contprof import _contprof
        contprof.start(profiles="cpu")
        print(json.dumps(_contprof.stats()))
        contprof.stop()
        """)
    stats = json.loads(run.proc.stdout.strip().splitlines()[-1])
    assert stats["layout_ok"] and stats["without_gil"], stats
    assert stats["reads"] == "direct", stats
    if sys.version_info >= (3, 13):
        assert stats["layout"] == "debug offsets %d.%d" % sys.version_info[:2]
    else:
        assert stats["layout"] == "compiled-in"
    assert "contprof:" not in run.proc.stderr, run.proc.stderr


# A thread's CPU in pure Python, as the two workloads below use it; its
# samples' cpu-time, from the profile.
SPIN = '''
def spin(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1
'''


def spinner_cpu(run):
    return sum(s.values.get("cpu-time", 0) for s in run.samples()
               if s.labels.get("thread name") == "spinner"
               and "spin" in s.functions())


# Direct reads (copies that recover from faults) by default; the
# application replacing the SIGSEGV handler after start (faulthandler) sends
# the sampler back to process_vm_readv, pass by pass, without a word and
# without losing samples; CONTPROF_PYTHON_READS=syscall asks for that.
READS = '''
import faulthandler, json, threading, time
import contprof
from contprof import _contprof

contprof.start(profiles="cpu", cpu_hz=200)
''' + SPIN + '''
t = threading.Thread(target=spin, args=(2.0,), name="spinner")
t.start()
spin(0.4)
before = _contprof.stats()
# Enabled at start up (PYTHONFAULTHANDLER, before contprof): disable puts
# back the handler it replaced, enable installs its own over ours.
faulthandler.disable()
faulthandler.enable()
t.join()
stats = _contprof.stats()
contprof.stop()
print(json.dumps(dict(before=before, after=stats)))
'''


@pytest.mark.parametrize("mode", ["direct", "syscall"])
def test_direct_reads_and_their_fallback(run_py, mode):
    run = run_py(READS, env={"CONTPROF_PYTHON_READS": mode})
    got = json.loads(run.proc.stdout.strip().splitlines()[-1])
    before, after = got["before"], got["after"]
    assert after["reads"] == mode, got
    if mode == "direct":
        assert before["syscall_passes"] == 0, got
        assert after["syscall_passes"] > 0, got  # faulthandler's from then on
    else:
        assert after["syscall_passes"] == 0 and after["read_faults"] == 0, got
    assert "contprof:" not in run.proc.stderr, run.proc.stderr
    # The spinner's 2 s of CPU, sampled before and after the switch.
    spinner = spinner_cpu(run)
    assert 1.6e9 < spinner < 2.4e9, spinner


# process_vm_readv refused by a seccomp filter (as some container profiles
# do): one contprof: line, then the GIL-held pass of before; still correct.
SECCOMP = '''
import ctypes, json, platform, threading, time
import contprof
from contprof import _contprof

class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]
# x86_64: process_vm_readv (310) -> EPERM, everything else allowed.
rules = [(0x20, 0, 0, 4), (0x15, 0, 3, 0xc000003e), (0x20, 0, 0, 0),
         (0x15, 0, 1, 310), (0x06, 0, 0, 0x00050001),
         (0x06, 0, 0, 0x7fff0000)]
arr = (Filter * len(rules))(*[Filter(*r) for r in rules])
prog = Prog(len(rules), arr)
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # seccomp filter

contprof.start(profiles="cpu", cpu_hz=200)
''' + SPIN + '''
t = threading.Thread(target=spin, args=(1.5,), name="spinner")
t.start(); spin(0.5); t.join()
stats = _contprof.stats()
contprof.stop()
print(json.dumps(stats))
'''


def test_refused_safe_reads_fall_back_to_the_gil(run_py):
    if platform.machine() != "x86_64":
        pytest.skip("the seccomp filter here is written for x86_64")
    run = run_py(SECCOMP)
    stats = json.loads(run.proc.stdout.strip().splitlines()[-1])
    assert not stats["without_gil"] and stats["layout_ok"], stats
    lines = [x for x in run.proc.stderr.splitlines() if "contprof:" in x]
    assert len(lines) == 1 and "process_vm_readv" in lines[0], lines
    spinner = spinner_cpu(run)
    assert 1.2e9 < spinner < 1.8e9, spinner


def test_threads_that_reuse_a_finished_threads_pthread(run_py):
    """glibc gives a new thread the struct pthread (so the pthread_t, the
    thread state's id before 3.11) of one that finished: the second batch is
    still sampled, with its own CPU clock. Before this was handled, 3.8-3.10
    recorded almost none of the second batch's 2 s."""
    from conftest import BURN
    run = run_py(BURN + """
import threading, contprof
contprof.start(profiles="cpu", cpu_hz=200)
def first_batch(): burn(0.3)
def second_batch(): burn(1.0)
for f in (first_batch, second_batch):
    ts = [threading.Thread(target=f) for _ in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
contprof.stop()
""")
    second = sum(s.values.get("cpu-time", 0) for s in run.samples()
                 if "second_batch" in s.functions())
    assert 1.6e9 < second < 2.4e9, second
