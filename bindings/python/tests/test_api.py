"""The Python API: start/stop/flush results, options named like the
environment variables (with their warnings, once), `python3 -m contprof`,
and `pip install` (offline, with build isolation) into a fresh venv."""
import glob
import json
import os
import shutil
import subprocess
import signal
import sys

from conftest import PKG, ROOT, c_build_dir
import pprof

# A process that recorded nothing writes no profile: the programs below
# compute a little before each period ends.
BURN = """
import time
def burn(seconds=0.3):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
"""


def test_start_stop_flush_and_errors(run_py):
    run = run_py(BURN + '''
import contprof
if True:
        assert not contprof.is_running()
        assert contprof.stop() is False
        assert contprof.start(service="api", upload_period=3600) is True
        assert contprof.is_running()
        try:
            contprof.start()
            raise SystemExit("second start did not fail")
        except contprof.ProfilerError as e:
            assert "already running" in str(e)
        try:
            contprof.start(no_such_option=1)
            raise SystemExit("unknown option accepted")
        except TypeError:
            pass
        burn()
        contprof.flush()
        burn()
        assert contprof.stop() is True
        assert contprof.start(enabled=False) is False
    ''')
    assert len(run.files()) == 2  # the flushed period and the last one


def test_bad_environment_value_warns_once(run_py):
    run = run_py(BURN + '''
import contprof
contprof.start()
burn()
contprof.stop()
''', env={"CONTPROF_CPU_HZ": "lots", "CONTPROF_TAGS": "novalue"})
    lines = [l for l in run.proc.stderr.splitlines()
             if l.startswith("contprof:")]
    assert len([l for l in lines if "CONTPROF_CPU_HZ" in l]) == 1, lines
    assert len(lines) == 2, lines
    p = pprof.read(run.files()[0])
    assert p.comment("service") == "workload.py" or p.comment("service")


def test_keyword_beats_environment(run_py):
    run = run_py(BURN + '''
import contprof
contprof.start(service="from-kwarg", tags={"team": "a"})
burn()
contprof.stop()
''', env={"CONTPROF_SERVICE": "from-env", "DD_ENV": "staging"})
    p = pprof.read(run.files()[0])
    assert p.comment("service") == "from-kwarg"
    assert p.comment("env") == "staging"
    assert p.comment("tag.team") == "a"


def test_pip_install_and_run_a_script(tmp_path):
    """pip install of a copy of bindings/python made elsewhere (the
    repository named by CONTPROF_SOURCE_DIR) into a fresh venv of this
    interpreter: build isolation (the backend requires nothing), no index,
    no setuptools needed; then python -m contprof script.py args."""
    src = tmp_path / "src"
    shutil.copytree(PKG, str(src), ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests", "*.so"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PIP_NO_BUILD_ISOLATION")}
    env["CONTPROF_SOURCE_DIR"] = ROOT
    if os.path.isfile(os.path.join(c_build_dir(), "libcontprof.a")):
        env["CONTPROF_BUILD_DIR"] = c_build_dir()
    py = str(venv / "bin" / "python")
    pip = subprocess.run([py, "-m", "pip", "install", "--no-index",
                          "--disable-pip-version-check", str(src)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=600)
    assert pip.returncode == 0, pip.stdout
    so = glob.glob(str(venv / "lib" / "python3*" / "site-packages" /
                       "contprof" / "_contprof*.so"))
    assert len(so) == 1

    script = tmp_path / "app.py"
    script.write_text('''
import sys, time
def main_work():
    end = time.thread_time() + 0.3
    while time.thread_time() < end:
        pass
main_work()
print("args", sys.argv[1:])
sys.exit(3)
''')
    out = tmp_path / "out"
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("CONTPROF_", "DD_", "PYROSCOPE_"))}
    run = subprocess.run([py, "-m", "contprof", "--output", str(out),
                          "--service", "app", str(script), "a1", "--x"],
                         env=clean, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True,
                         cwd=str(tmp_path), timeout=60)
    assert run.returncode == 3, run.stderr
    assert "args ['a1', '--x']" in run.stdout
    files = glob.glob(str(out / "app.*.pb.gz"))
    assert len(files) == 1
    p = pprof.read(files[0])
    assert p.total("cpu-time", lambda s: "main_work" in s.functions()) > 0.2e9


def test_signals_blocked_by_the_application_stay_its_own(run_py):
    """The sigwait pattern: the main thread blocks SIGUSR1 and takes it with
    signal.sigwait. The profiler's threads (its sampler, its namer, the
    library's) block every signal, so the kernel keeps the signal pending
    for the application instead of delivering it to one of them, where its
    default action ended the process. Native frames on: its sampler also
    signals the application's threads."""
    run = run_py(BURN + '''
import os, signal, time, contprof
contprof.start(profiles="cpu,wall", python_native=True, upload_period=3600)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
burn(0.2)
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.3)
print("got", int(signal.sigwait({signal.SIGTERM, signal.SIGUSR1})))
for tid in os.listdir("/proc/self/task"):
    with open("/proc/self/task/%s/comm" % tid) as f:
        name = f.read().strip()
    if name.startswith("contprof"):
        with open("/proc/self/task/%s/status" % tid) as f:
            blocked = [l for l in f if l.startswith("SigBlk:")][0].split()[1]
        # SIGUSR1 (10) and SIGTERM (15) are blocked there.
        assert int(blocked, 16) & (1 << 9) and int(blocked, 16) & (1 << 14), \
            (name, blocked)
        print("blocked", name)
contprof.stop()
''')
    out = run.proc.stdout
    assert "got %d" % int(signal.SIGUSR1) in out, out + run.proc.stderr
    assert "blocked contprof-python" in out, out


def test_long_names_are_cut_with_a_mark(run_py):
    """A function name longer than the 255 bytes kept ends in "...", cut
    after a whole character (ASCII and not)."""
    run = run_py(BURN + '''
import contprof
def make(name):
    ns = {}
    exec("def %s(b):\\n    b(0.3)\\n" % name, ns)
    return ns[name]
contprof.start(profiles="cpu", upload_period=3600)
make("f" + "a" * 300)(burn)
make("g" + "\\u00e9" * 300)(burn)
contprof.stop()
''')
    names = set()
    for path in run.files():
        for sample in pprof.read(path).samples:
            names.update(sample.functions())
    long_ascii = [n for n in names if n.startswith("faaa")]
    long_utf8 = [n for n in names if n.startswith("g\u00e9")]
    assert long_ascii and long_utf8, sorted(names)
    for n in long_ascii + long_utf8:
        assert n.endswith("..."), n
        assert len(n.encode()) <= 255, n
    assert long_utf8[0][:-3].endswith("\u00e9")


def test_overhead_says_what_the_profile_says(run_py):
    run = run_py(BURN + '''
import json
import contprof
assert contprof.overhead()["samples"] == 0  # nothing written yet
contprof.start(profiles="cpu,alloc", upload_period=3600)
blocks = []
for i in range(20000):
    blocks.append(bytearray(4096))
    blocks = blocks[-100:]
burn()
contprof.flush()
print(json.dumps(contprof.overhead()))
burn()
contprof.stop()
print(json.dumps(contprof.overhead(since_start=True)))
''')
    last, total = [json.loads(l) for l in run.proc.stdout.splitlines()[-2:]]
    p = pprof.read(run.files()[0])  # the flushed period's
    for key in ("profiler_cpu_ns", "profiler_threads_cpu_ns",
                "profiler_hooks_ns", "profiler_kernel_ns", "process_cpu_ns",
                "profiler_rss_bytes", "profiler_drain_ns"):
        assert last[key] == int(p.comment(key)), key
    assert abs(last["profiler_overhead_pct"] -
               float(p.comment("profiler_overhead_pct"))) < 0.001
    assert last["max_overhead_pct"] == float(p.comment("max_overhead_pct"))
    assert sorted(last["profiles"]) == ["alloc", "cpu"]
    for name, s in last["profiles"].items():
        assert s["samples"] == int(p.comment("samples." + name))
        assert s["drops"] == int(p.comment("drops." + name))
        assert s["hooks_ns"] == int(p.comment("profiler_hooks_ns." + name))
        assert s["slowdown"] == int(p.comment("slowdown." + name))
        rate = p.comment("sampling." + name).rstrip("HzmsB")
        assert s["sampling"] == float(rate), (name, rate)
    assert last["profiles"]["cpu"]["samples"] > 0
    assert last["profiles"]["alloc"]["samples"] > 0
    assert last["samples"] == sum(s["samples"]
                                  for s in last["profiles"].values())
    # Since the start: both profiles.
    assert total["samples"] >= last["samples"]
    assert total["process_cpu_ns"] > last["process_cpu_ns"]
