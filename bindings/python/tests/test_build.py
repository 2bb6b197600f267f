"""The build backend (backend/contprof_build.py): the wheel it writes for
this interpreter (tag, RECORD hashes, an extension that compiles without
warnings and exports only its init function), its sdist, and its refusals:
a free-threaded interpreter (at build and at import), a missing compiler or
CMake, each with one `contprof:` line."""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

from conftest import PKG, ROOT

sys.path.insert(0, os.path.join(PKG, "contprof"))
import _support  # noqa: E402

def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(contprof VERSION ([0-9.]+)",
                         f.read()).group(1)


def backend(code, env=None, cwd=PKG, prelude=""):
    """Runs `code` with the backend (cwd's) imported as b, in a fresh
    interpreter, as a PEP 517 frontend would."""
    return subprocess.run(
        [sys.executable, "-c", prelude + "import sys; sys.path.insert(0, "
         "'backend'); import contprof_build as b; " + code],
        cwd=cwd, env=env or dict(os.environ), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, universal_newlines=True, timeout=600)


def contprof_lines(text):
    return [l for l in text.splitlines() if l.startswith("contprof:")]


def test_wheel_name_tag_and_record(wheel):
    ver = project_version()
    tag = "cp%d%d-cp%d%d-linux_x86_64" % (sys.version_info[:2] * 2)
    assert os.path.basename(wheel.path) == "contprof-%s-%s.whl" % (ver, tag)
    info = "contprof-%s.dist-info/" % ver
    ext = "contprof/_contprof" + sysconfig.get_config_var("EXT_SUFFIX")
    with zipfile.ZipFile(wheel.path) as z:
        names = set(z.namelist())
        assert names == {
            "contprof/__init__.py", "contprof/__main__.py",
            "contprof/_support.py", "contprof/_tasks.py", ext,
            info + "METADATA", info + "WHEEL",
            info + "top_level.txt", info + "RECORD"}
        assert "Tag: %s\n" % tag in z.read(info + "WHEEL").decode()
        assert "Root-Is-Purelib: false" in z.read(info + "WHEEL").decode()
        meta = z.read(info + "METADATA").decode()
        assert "\nName: contprof\n" in meta
        assert "\nVersion: %s\n" % ver in meta
        rows = list(csv.reader(io.StringIO(z.read(info + "RECORD").decode())))
        # Every file once, with its sha256 (urlsafe base64, no padding) and
        # size; RECORD itself without either.
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path == info + "RECORD":
                assert digest == "" and size == ""
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want, path
            assert int(size) == len(data), path
        assert z.getinfo(ext).external_attr >> 16 & 0o777 == 0o755


def test_extension_compiles_without_warnings(wheel):
    assert "compiling" in wheel.output
    ours = [line for line in wheel.output.splitlines()
            if "_contprof.c" in line and "warning:" in line]
    assert not ours, "\n".join(ours)


def test_extension_exports_only_its_init(wheel, tmp_path):
    """libcontprof's interposers and internals stay private to the
    extension (-Wl,--exclude-libs,ALL, the version script, the renamed
    copy of the archive)."""
    with zipfile.ZipFile(wheel.path) as z:
        z.extractall(str(tmp_path))
    so = [os.path.join(tmp_path, "contprof", n)
          for n in os.listdir(str(tmp_path / "contprof")) if n.endswith(".so")]
    nm = subprocess.run(["nm", "-D", "--defined-only", so[0]],
                        stdout=subprocess.PIPE, universal_newlines=True,
                        check=True)
    assert [l.split()[-1] for l in nm.stdout.splitlines()] == [
        "PyInit__contprof"]
    undefined = subprocess.run(["nm", "-D", "--undefined-only", so[0]],
                               stdout=subprocess.PIPE,
                               universal_newlines=True, check=True).stdout
    assert "cp_python_unhooked_" not in undefined
    ldd = subprocess.run(["ldd", so[0]], stdout=subprocess.PIPE,
                         universal_newlines=True)
    assert "libcontprof" not in ldd.stdout


def test_support_decision():
    """Which interpreters are refused, and with what line."""
    assert _support.unsupported((3, 8, 0), None) is None
    assert _support.unsupported((3, 11, 2), 0) is None
    assert _support.unsupported((3, 13, 0), 0) is None
    assert _support.unsupported((3, 7, 16), None) == (
        "contprof: CPython 3.7 is not supported (3.8 or newer is needed)")
    for v in ((3, 13, 0), (3, 14, 0)):
        msg = _support.unsupported(v, 1)
        assert msg.startswith("contprof: the free-threaded CPython build "
                              "(%d.%dt" % v[:2]), msg
        assert "not supported" in msg and "\n" not in msg


# Pretends to be a free-threaded build: sysconfig's Py_GIL_DISABLED is 1.
FREE_THREADED = """
import sysconfig
_real = sysconfig.get_config_var
sysconfig.get_config_var = lambda n: 1 if n == "Py_GIL_DISABLED" else _real(n)
"""


def test_free_threaded_refused_at_build(tmp_path):
    proc = backend("b.build_wheel(%r)" % str(tmp_path),
                   prelude=FREE_THREADED)
    assert proc.returncode == 1
    assert contprof_lines(proc.stderr) == [_support.unsupported(
        sys.version_info, 1)], proc.stderr
    assert "Traceback" not in proc.stderr
    assert os.listdir(str(tmp_path)) == []


def test_free_threaded_refused_at_import(libdir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if libdir:
        env["PYTHONPATH"] = libdir
    proc = subprocess.run(
        [sys.executable, "-c", FREE_THREADED + """
try:
    import contprof
except ImportError as e:
    print(e)
    raise SystemExit(0)
raise SystemExit("imported")
"""], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == _support.unsupported(sys.version_info, 1)


def test_missing_compiler_is_one_line(tmp_path):
    env = dict(os.environ, CC="contprof-no-such-cc")
    proc = backend("b.build_wheel(%r)" % str(tmp_path), env=env)
    assert proc.returncode == 1
    assert contprof_lines(proc.stderr) == [
        "contprof: cc (contprof-no-such-cc) was not found; it is needed to "
        "build the extension (on Debian: apt-get install build-essential)"]
    assert "Traceback" not in proc.stderr


def test_missing_cmake_is_one_line(tmp_path):
    """No CONTPROF_BUILD_DIR and no cmake on PATH (only the compiler)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC")).split()[0]
    os.symlink(shutil.which(cc), str(bindir / os.path.basename(cc)))
    env = {k: v for k, v in os.environ.items()
           if k not in ("CONTPROF_BUILD_DIR", "CC")}
    env["PATH"] = str(bindir)
    proc = backend("b.build_wheel(%r)" % str(tmp_path), env=env)
    assert proc.returncode == 1
    assert contprof_lines(proc.stderr) == [
        "contprof: cmake (cmake) was not found; it is needed to build the "
        "extension (on Debian: apt-get install cmake)"], proc.stderr


def test_sdist_carries_what_builds_libcontprof(tmp_path):
    """The sdist holds the package and, under libcontprof/, the parts of the
    repository that CMake needs; unpacked elsewhere, its backend finds that
    copy (not this checkout)."""
    proc = backend("print(b.build_sdist(%r))" % str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    name = proc.stdout.split()[-1]
    base = "contprof-%s" % project_version()
    assert name == base + ".tar.gz"
    with tarfile.open(str(tmp_path / name)) as tar:
        names = set(tar.getnames())
        if hasattr(tarfile, "data_filter"):  # 3.8.17+: no warning on 3.12+
            tar.extractall(str(tmp_path / "x"), filter="data")
        else:
            tar.extractall(str(tmp_path / "x"))
    for want in ("pyproject.toml", "backend/contprof_build.py",
                 "contprof/__init__.py", "contprof/_contprof.c",
                 "contprof/_contprof.map", "PKG-INFO", "README.md",
                 "libcontprof/CMakeLists.txt", "libcontprof/src/config.c",
                 "libcontprof/include/contprof/runtime.h",
                 "libcontprof/src/exporter/profile.proto"):
        assert base + "/" + want in names, want
    assert not [n for n in names if "__pycache__" in n or "/build/" in n]
    env = {k: v for k, v in os.environ.items()
           if k != "CONTPROF_SOURCE_DIR"}
    where = backend("print(b.source_root())", env=env,
                    cwd=str(tmp_path / "x" / base))
    assert where.stdout.strip() == str(tmp_path / "x" / base / "libcontprof")


def test_compile_error_line_becomes_the_message():
    """A compiler stopped by _contprof.c's `#error "contprof: ..."` (an
    interpreter the extension does not know) ends the build with that
    line; any other failed step with the step's name."""
    proc = backend("b.run(['sh', '-c', 'echo \\'x.c:3:2: error: #error "
                   "\"contprof: layout unknown\"\\'; exit 1'])")
    assert proc.returncode == 1
    assert contprof_lines(proc.stderr) == [
        "contprof: layout unknown (this is CPython %d.%d)" %
        sys.version_info[:2]], proc.stderr
    proc = backend("b.run(['false'], step='linking the extension')")
    assert contprof_lines(proc.stderr) == [
        "contprof: linking the extension failed (exit 1, output above)"]


def test_copy_without_repository_is_one_line(tmp_path):
    """bindings/python copied elsewhere builds only with
    CONTPROF_SOURCE_DIR naming a checkout; otherwise one line says so."""
    src = tmp_path / "src"
    shutil.copytree(PKG, str(src), ignore=shutil.ignore_patterns(
        "build", "__pycache__", "tests"))
    env = {k: v for k, v in os.environ.items()
           if k != "CONTPROF_SOURCE_DIR"}
    proc = backend("b.build_wheel(%r)" % str(tmp_path), env=env,
                   cwd=str(src))
    assert proc.returncode == 1
    lines = contprof_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(
        "contprof: the contprof repository was not found"), proc.stderr
    assert lines[0].endswith("set CONTPROF_SOURCE_DIR to a checkout")
    env["CONTPROF_SOURCE_DIR"] = str(tmp_path)
    proc = backend("b.build_wheel(%r)" % str(tmp_path), env=env,
                   cwd=str(src))
    assert contprof_lines(proc.stderr) == [
        "contprof: CONTPROF_SOURCE_DIR=%s is not a contprof checkout (no "
        "include/contprof/runtime.h)" % tmp_path], proc.stderr
    env["CONTPROF_SOURCE_DIR"] = ROOT
    proc = backend("print(b.source_root(), b.version())", env=env,
                   cwd=str(src))
    assert proc.stdout.split() == [ROOT, project_version()]
