"""Mixed stacks (CONTPROF_PYTHON_NATIVE=1): the native frames of a C call
appear under the Python function that made it, in one stack; frames never
interleave wrongly; off by default."""
import json

# One thread alternates zlib.compress of a 4 MiB buffer (in compress_part)
# with zlib.decompress of it (in decompress_part), a few ms each, so that
# a sample that put deflate under decompress_part (or inflate under
# compress_part) would be caught. At exit: the sampler's counters.
ZLIB = '''
import json, os, threading, time, zlib
import contprof
from contprof import _contprof

contprof.start(profiles="cpu", cpu_hz=1000)
DATA = os.urandom(1 << 20) + bytes(range(256)) * 12288
PACKED = zlib.compress(DATA, 6)

def compress_part():
    return zlib.compress(DATA, 6)

def decompress_part():
    return zlib.decompress(PACKED)

def worker():
    t0 = time.thread_time()
    while time.thread_time() - t0 < SECONDS:
        compress_part()
        decompress_part()

w = threading.Thread(target=worker, name="worker")
w.start(); w.join()
print(json.dumps(_contprof.stats()))
contprof.stop()
'''


def is_python(frame):
    return frame[1].endswith(".py")


def caller_of_native(sample, prefix):
    """The Python function right above the outermost frame named prefix...
    and whether only native frames lie between them (None: no such frame)."""
    fr = sample.frames
    idx = [i for i, f in enumerate(fr) if f[0].startswith(prefix)]
    if not idx:
        return None
    for f in fr[max(idx) + 1:]:
        if is_python(f):
            return f[0]
    return ""


def run_zlib(run_py, env, seconds=3):
    run = run_py(ZLIB.replace("SECONDS", str(seconds)), env=env, timeout=300)
    stats = json.loads(run.proc.stdout.strip().splitlines()[-1])
    worker = [s for s in run.samples()
              if s.labels.get("thread name") == "worker"]
    return stats, worker, run


def test_zlib_frames_under_their_python_caller(run_py):
    """At least 80% of compress_part's cpu-time has libz's deflate frames
    under it. Every sample that has deflate has compress_part as the
    nearest Python frame above it, and inflate decompress_part: never the
    other one (a stack read at another moment than the native one)."""
    stats, worker, run = run_zlib(run_py, {"CONTPROF_PYTHON_NATIVE": "1"})
    assert stats["native_on"] == 1, stats
    total = sum(s.values.get("cpu-time", 0) for s in worker
                if "compress_part" in s.functions())
    with_deflate = sum(
        s.values.get("cpu-time", 0) for s in worker
        if caller_of_native(s, "deflate") == "compress_part")
    assert total > 0, stats
    share = 100.0 * with_deflate / total
    print("compress_part: %.1f%% of its cpu-time with deflate under it; "
          "stats %s" % (share, stats))
    assert share >= 80.0, (share, stats)
    for s in worker:
        for prefix, caller in (("deflate", "compress_part"),
                               ("inflate", "decompress_part")):
            got = caller_of_native(s, prefix)
            assert got in (None, caller), (prefix, s.frames)
        # The Python frames keep their order: the thread's entry at the
        # root, worker above the parts.
        py = [f[0] for f in s.frames if is_python(f)]
        if py and py[0] in ("compress_part", "decompress_part"):
            assert py[1] == "worker", s.frames
    assert stats["native_merged"] > 0.5 * stats["native_requests"], stats


def test_off_by_default(run_py):
    """Without the option, no signal and no native frame: the stack is
    the Python one."""
    stats, worker, run = run_zlib(run_py, {}, seconds=1)
    assert stats["native_on"] == 0 and stats["native_requests"] == 0, stats
    assert worker
    for s in worker:
        assert all(is_python(f) or f[0].startswith("[") for f in s.frames), \
            s.frames


# Stacks that change all the time, Python called back from C (sorted with a
# key function), deep recursion around C calls, threads that come and go,
# and the application's own real-time signal handler: no crash, and the
# application's handler gets exactly its own signals.
CHURN = '''
import json, os, random, signal, threading, time, zlib
import contprof
from contprof import _contprof

got = []
signal.signal(signal.SIGRTMIN + 1, lambda s, f: got.append(s))
contprof.start(profiles="cpu,wall", cpu_hz=1000, wall_interval_ms=1)
BUF = os.urandom(1 << 16)

def key(x):
    return -x

def rec(n):
    if n == 0:
        zlib.compress(BUF, 1)
        sorted(range(2000), key=key)
        return 0
    return rec(n - 1) + 1

def churn():
    t0 = time.thread_time()
    while time.thread_time() - t0 < 1.5:
        rec(random.randint(0, 60))

def short():
    for _ in range(50):
        rec(5)

ts = [threading.Thread(target=churn) for _ in range(2)]
ts += [threading.Thread(target=short) for _ in range(30)]
for t in ts:
    t.start()
for i in range(5):
    os.kill(os.getpid(), signal.SIGRTMIN + 1)
    time.sleep(0.05)
for t in ts:
    t.join()
print(json.dumps(dict(_contprof.stats(), app_signals=len(got))))
contprof.stop()
'''


def test_churn_no_crash(run_py):
    """No crash while stacks change under the handler; the application's
    own real-time signal handler still gets its 5 signals; a Python
    callback called from C keeps its Python caller right above it (the
    interpreter's frames between are dropped, never a Python frame)."""
    run = run_py(CHURN, env={"CONTPROF_PYTHON_NATIVE": "1"}, timeout=300)
    stats = json.loads(run.proc.stdout.strip().splitlines()[-1])
    print(stats)
    assert stats["app_signals"] == 5, stats
    assert stats["native_merged"] > 0, stats
    samples = run.samples()
    assert samples
    for s in samples:
        py = [f[0] for f in s.frames if is_python(f)]
        # The key function is only ever called by sorted, from rec: a
        # stack that has it has rec (or nothing of ours) right above.
        if "key" in py:
            assert py[py.index("key") + 1] == "rec", s.frames


# The application takes our signal after start: it gets its own signals,
# and the sampler stops sending it (one line).
TAKEN = """
import json, os, signal, threading, time, zlib
import contprof
from contprof import _contprof

contprof.start(profiles="cpu", cpu_hz=1000, python_native=True)
BUF = os.urandom(1 << 20)
stop = False
def work():
    while not stop:
        zlib.compress(BUF, 6)
t = threading.Thread(target=work); t.start()
time.sleep(0.3)
before = _contprof.stats()
sig = before["native_signal"]
got = []
signal.signal(sig, lambda s, f: got.append(s))
time.sleep(0.3)
for i in range(3):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)
stop = True; t.join()
after = _contprof.stats()
print(json.dumps(dict(got=len(got), before=before["native_merged"],
                      on=after["native_on"])))
contprof.stop()
"""


def test_application_takes_the_signal(run_py):
    """Its handler runs for its own three kill()s (and at most one pass of
    ours sent before the sampler saw the change); mixed stacks stop."""
    run = run_py(TAKEN, timeout=120)
    out = json.loads(run.proc.stdout.strip().splitlines()[-1])
    assert out["before"] > 0, out
    assert out["on"] == 0, out
    assert 3 <= out["got"] <= 4, out
    assert "was given another handler" in run.proc.stderr, run.proc.stderr
