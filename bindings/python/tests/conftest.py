"""Builds the extension once per session through the package's own PEP 517
backend (backend/contprof_build.py's build_wheel, run by this interpreter
against the C build: $BUILD_DIR or <repo>/build, after scripts/build) and
runs workloads in fresh interpreters that import it.

With CONTPROF_TEST_INSTALLED=1 (scripts/test-python, which pip-installs the
package into a venv and runs this suite with that venv's python), the
workloads import the installed package instead."""
import glob
import os
import signal
import subprocess
import sys
import textwrap
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, HERE)

import pprof  # noqa: E402

INSTALLED = os.environ.get("CONTPROF_TEST_INSTALLED") == "1"


def c_build_dir():
    return os.environ.get("BUILD_DIR") or os.path.join(ROOT, "build")


def build_env():
    """The environment of a build: reuses the C build when there is one."""
    env = dict(os.environ)
    if os.path.isfile(os.path.join(c_build_dir(), "libcontprof.a")):
        env["CONTPROF_BUILD_DIR"] = c_build_dir()
    return env


class Wheel:
    def __init__(self, path, output):
        self.path = path
        self.output = output  # the backend's and compiler's output


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The wheel that build_wheel writes for this interpreter (what pip
    installs), built as a PEP 517 frontend would: a fresh interpreter with
    the backend on its path, in the package directory."""
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, 'backend'); import contprof_build;"
         " contprof_build.build_wheel(sys.argv[1])", str(out)],
        cwd=PKG, env=build_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)
    assert proc.returncode == 0, proc.stdout
    wheels = glob.glob(str(out / "*.whl"))
    assert len(wheels) == 1, wheels
    return Wheel(wheels[0], proc.stdout)


@pytest.fixture(scope="session")
def libdir(request, tmp_path_factory):
    """A directory to put on PYTHONPATH that holds the package (the wheel,
    unpacked), or None when the running interpreter has it installed."""
    if INSTALLED:
        return None
    out = tmp_path_factory.mktemp("lib")
    with zipfile.ZipFile(request.getfixturevalue("wheel").path) as z:
        z.extractall(str(out))
    for so in glob.glob(str(out / "contprof" / "*.so")):
        os.chmod(so, 0o755)
    return str(out)


class Run:
    def __init__(self, proc, outdir):
        self.proc = proc
        self.outdir = outdir

    def files(self):
        return sorted(glob.glob(os.path.join(self.outdir, "*.pb.gz")))

    def samples(self):
        out = []
        for f in self.files():
            out += pprof.read(f).samples
        return out


def hung_stacks(p):
    """The native stacks of a workload that does not end (gdb, when it is
    there), then its Python stacks (faulthandler's, on SIGABRT); kills it."""
    out = []
    try:
        gdb = subprocess.run(
            ["gdb", "-p", str(p.pid), "-batch", "-nx",
             "-ex", "thread apply all bt 40"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=120)
        out.append(gdb.stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        out.append("gdb: %s" % e)
    p.send_signal(signal.SIGABRT)
    try:
        _, err = p.communicate(timeout=20)
        out.append(err)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        out.append(err)
    return "\n".join(x for x in out if x)


def runner(libdir, tmp_path):
    """run(code, env={}) runs code in this interpreter (sys.executable)
    with the package importable (from libdir, or installed) and
    CONTPROF_OUTPUT_DIR set; returns a Run."""

    def run(code, env=None, timeout=90, check=True):
        outdir = str(tmp_path / "profiles")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("CONTPROF_", "DD_", "PYROSCOPE_"))}
        e.pop("PYTHONPATH", None)
        if libdir:
            e["PYTHONPATH"] = libdir
        e.update({"CONTPROF_OUTPUT_DIR": outdir, "CONTPROF_EXPORT": "file"})
        e.update(env or {})
        script = tmp_path / "workload.py"
        script.write_text(textwrap.dedent(code))
        e.setdefault("PYTHONFAULTHANDLER", "1")
        p = subprocess.Popen([sys.executable, str(script)], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=str(tmp_path))
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = hung_stacks(p)
            pytest.fail("workload still running after %d s; its threads:\n%s"
                        % (timeout, stacks), pytrace=False)
        proc = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return Run(proc, outdir)

    return run


@pytest.fixture
def run_py(libdir, tmp_path):
    return runner(libdir, tmp_path)


BURN = '''
import time
def burn(seconds):
    """Spends `seconds` of this thread's CPU time in pure Python."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i
    return x
'''
