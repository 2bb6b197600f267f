"""Builds the extension once per session (setup.py build, into a temporary
directory, against the C build: $BUILD_DIR or <repo>/build, after
scripts/build) and runs workloads in fresh interpreters that import it."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, HERE)

import pprof  # noqa: E402


def c_build_dir():
    return os.environ.get("BUILD_DIR") or os.path.join(ROOT, "build")


@pytest.fixture(scope="session")
def libdir(tmp_path_factory):
    base = tmp_path_factory.mktemp("build")
    env = dict(os.environ)
    if os.path.isfile(os.path.join(c_build_dir(), "libcontprof.a")):
        env["CONTPROF_BUILD_DIR"] = c_build_dir()
    out = base / "lib"
    proc = subprocess.run(
        [sys.executable, "setup.py", "build", "--build-base",
         str(base / "b"), "--build-lib", str(out), "--build-temp",
         str(base / "tmp")], cwd=PKG, env=env, capture_output=True,
        text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The extension's own code compiles without warnings.
    ours = [line for line in (proc.stdout + proc.stderr).splitlines()
            if "_contprof.c" in line and "warning:" in line]
    assert not ours, "\n".join(ours)
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


def runner(libdir, tmp_path):
    """run(code, env={}) runs code in this interpreter (/usr/bin/python3)
    with the package importable and CONTPROF_OUTPUT_DIR set; returns a
    Run."""

    def run(code, env=None, timeout=90, check=True):
        outdir = str(tmp_path / "profiles")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("CONTPROF_", "DD_", "PYROSCOPE_"))}
        e.update({"PYTHONPATH": libdir, "CONTPROF_OUTPUT_DIR": outdir,
                  "CONTPROF_EXPORT": "file"})
        e.update(env or {})
        script = tmp_path / "workload.py"
        script.write_text(textwrap.dedent(code))
        proc = subprocess.run([sys.executable, str(script)], env=e,
                              capture_output=True, text=True,
                              timeout=timeout, cwd=str(tmp_path))
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
