"""contprof's in-tree PEP 517 build backend (pyproject.toml): builds the
wheel with the standard library only, so `pip install ./bindings/python`
works offline on every CPython, including those without setuptools (pyenv's
3.12 and 3.13).

build_wheel builds libcontprof.a with CMake from this repository (or reuses
CONTPROF_BUILD_DIR), renames the archive's LD_PRELOAD interposers out of a
private copy, compiles contprof/_contprof.c with the interpreter's own
compiler and flags (sysconfig: CC, CFLAGS, CCSHARED, LDSHARED, INCLUDEPY,
EXT_SUFFIX), links it with -Wl,--exclude-libs,ALL and the version script
contprof/_contprof.map, and zips the package, the extension and the
.dist-info (METADATA, WHEEL with this interpreter's tag, RECORD with sha256
hashes). The installed package needs only system libraries (libcurl,
libunwind, libprotobuf-c, zlib) at run time.

Environment: CONTPROF_BUILD_DIR (a build directory of the repository that
holds libcontprof.a, e.g. after scripts/build: reused instead of building
one), CONTPROF_SOURCE_DIR (the repository, when bindings/python was copied
elsewhere), CC, CFLAGS, CPPFLAGS, LDFLAGS (as with setuptools).

A missing tool or header stops the build with one `contprof:` line that
names it and the Debian package that provides it.
"""
import base64
import hashlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "contprof"
SUMMARY = ("contprof: always-on profiler for Python (CPU, wall, allocations, "
           "live heap) with Datadog and Pyroscope uploads")
# What an sdist carries of the repository to build libcontprof.a (the
# top-level CMakeLists.txt adds examples/ even with the tests off).
REPO_PARTS = ["CMakeLists.txt", "cmake", "include", "src", "preload", "tools",
              "examples"]
# The package's own files in the wheel (the extension is added to them).
PACKAGE_FILES = ["__init__.py", "__main__.py", "_support.py", "_tasks.py"]
LIBRARIES = ["unwind", "protobuf-c", "curl", "z", "dl", "m",
             "pthread"]
COMPILE_ARGS = ["-std=gnu11", "-Wall", "-Wextra",
                "-Wno-missing-field-initializers"]

# The functions libcontprof interposes (src/interpose/exports.map) for the native
# samplers. The extension samples Python itself and must not interpose
# anything: its own calls go straight to libc.
INTERPOSED = [
    "pthread_create", "pthread_mutex_lock", "pthread_mutex_timedlock",
    "pthread_mutex_clocklock", "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock", "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock", "pthread_rwlock_clockrdlock",
    "pthread_rwlock_clockwrlock", "malloc", "free", "calloc", "realloc",
    "reallocarray", "posix_memalign", "aligned_alloc", "memalign", "valloc",
    "pvalloc", "malloc_usable_size", "sigaction", "signal", "nanosleep",
    "clock_nanosleep", "sleep", "usleep", "poll", "epoll_wait", "select"
]

# Debian packages that provide what the build runs or includes.
DEBIAN = {
    "cmake": "cmake",
    "ar": "binutils",
    "nm": "binutils",
    "objcopy": "binutils",
    "cc": "build-essential",
}
LIB_PACKAGES = ("pkg-config libunwind-dev libprotobuf-c-dev "
                "protobuf-c-compiler zlib1g-dev libcurl4-openssl-dev")


class BuildError(SystemExit):
    """Stops the build with its one `contprof:` line (SystemExit: the
    frontend shows the line, not a traceback)."""

    def __init__(self, message):
        super().__init__("contprof: " + message)


def log(message):
    print("contprof_build: " + message, file=sys.stderr, flush=True)


# --- what is being built ----------------------------------------------------


def source_root():
    """The repository: CONTPROF_SOURCE_DIR, the copy an sdist carries
    (./libcontprof), or the checkout this directory is part of."""
    given = os.environ.get("CONTPROF_SOURCE_DIR")
    if given and not os.path.isfile(
            os.path.join(given, "include", "contprof", "runtime.h")):
        raise BuildError("CONTPROF_SOURCE_DIR=%s is not a contprof checkout "
                         "(no include/contprof/runtime.h)" % given)
    for root in (given, os.path.join(HERE, "libcontprof"),
                 os.path.dirname(os.path.dirname(HERE))):
        if root and os.path.isfile(
                os.path.join(root, "include", "contprof", "runtime.h")):
            return os.path.abspath(root)
    raise BuildError(
        "the contprof repository was not found (no include/contprof/"
        "runtime.h in %s nor %s); set CONTPROF_SOURCE_DIR to a checkout" %
        (os.path.join(HERE, "libcontprof"),
         os.path.dirname(os.path.dirname(HERE))))


def version(root=None):
    """The project's version, from CMakeLists.txt's project() (one place)."""
    path = os.path.join(root or source_root(), "CMakeLists.txt")
    with open(path, encoding="utf-8") as f:
        m = re.search(r"project\(\s*contprof\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise BuildError("no project(contprof VERSION ...) in %s" % path)
    return m.group(1)


def load_support():
    """contprof/_support.py, loaded by path (importing the package would
    import the extension that is being built)."""
    spec = importlib.util.spec_from_file_location(
        "contprof_support", os.path.join(HERE, "contprof", "_support.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_interpreter():
    refused = load_support().unsupported(
        sys.version_info, sysconfig.get_config_var("Py_GIL_DISABLED"))
    if refused:
        raise SystemExit(refused)


def wheel_tag():
    """This interpreter's tag, e.g. cp311-cp311-linux_x86_64 (a debug build
    adds d, a free-threaded one t, to the ABI)."""
    impl = "cp%d%d" % sys.version_info[:2]
    abi = impl
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        abi += "t"
    if sysconfig.get_config_var("Py_DEBUG"):
        abi += "d"
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "%s-%s-%s" % (impl, abi, plat)


def metadata(ver):
    readme = os.path.join(HERE, "README.md")
    with open(readme, encoding="utf-8") as f:
        description = f.read()
    return ("Metadata-Version: 2.1\n"
            "Name: %s\nVersion: %s\nSummary: %s\n"
            "Requires-Python: >=3.8\n"
            "Description-Content-Type: text/markdown\n\n%s" %
            (NAME, ver, SUMMARY, description))


# --- tools --------------------------------------------------------------------


def tool(argv0, what):
    """argv0 if it can be run, else one line naming it and its package."""
    if shutil.which(argv0):
        return argv0
    package = DEBIAN.get(what, "build-essential")
    raise BuildError(
        "%s (%s) was not found; it is needed to build the extension (on "
        "Debian: apt-get install %s)" % (what, argv0, package))


def run(argv, cwd=None, what=None, echo=True, step=None):
    """Runs a build step (its output to stdout, where pip -v shows it); a
    failure ends in one line after that output: the step's `#error
    "contprof: ..."` if the compiler stopped on one, else what failed."""
    try:
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              universal_newlines=True)
    except OSError as e:
        raise BuildError("could not run %s: %s" % (argv[0], e))
    if echo or proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
    if proc.returncode != 0:
        m = re.search(r'#error "contprof: ([^"]*)"', proc.stdout)
        if m:
            raise BuildError("%s (this is CPython %d.%d)" %
                             (m.group(1), *sys.version_info[:2]))
        raise BuildError("%s failed (exit %d, output above)%s" %
                         (step or os.path.basename(argv[0]),
                          proc.returncode, "; " + what if what else ""))
    return proc.stdout


def config_cmd(var):
    return shlex.split(sysconfig.get_config_var(var) or "")


def compiler():
    """The interpreter's C compiler (sysconfig CC, or $CC) as argv."""
    cc = shlex.split(os.environ["CC"]) if os.environ.get("CC") else \
        config_cmd("CC")
    if not cc:
        cc = ["cc"]
    tool(cc[0], "cc")
    return cc


# --- libcontprof.a -------------------------------------------------------------


def build_root():
    """Where intermediate files go: bindings/python/build (ignored by git,
    kept between builds so CMake's build is incremental), or a temporary
    directory when the source tree is read-only."""
    path = os.path.join(HERE, "build")
    try:
        os.makedirs(path, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="contprof-build-")


def libcontprof(root, work):
    """libcontprof.a: CONTPROF_BUILD_DIR's, or built here with CMake."""
    build_dir = os.environ.get("CONTPROF_BUILD_DIR")
    if build_dir:
        lib = os.path.join(build_dir, "libcontprof.a")
        if not os.path.isfile(lib):
            raise BuildError("%s is missing (run scripts/build, or unset "
                             "CONTPROF_BUILD_DIR)" % lib)
        return lib
    cmake = tool("cmake", "cmake")
    build_dir = os.path.join(work, "libcontprof")
    log("building libcontprof.a with CMake in %s" % build_dir)
    run([cmake, "-S", root, "-B", build_dir,
         "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCONTPROF_BUILD_TESTS=OFF"],
        step="configuring libcontprof with CMake",
        what="libcontprof's libraries may be missing (on Debian: apt-get "
        "install %s)" % LIB_PACKAGES)
    run([cmake, "--build", build_dir, "--target", "contprof_static",
         "-j%d" % (os.cpu_count() or 1)], step="building libcontprof.a")
    return os.path.join(build_dir, "libcontprof.a")


def unhooked_archive(lib, work):
    """A copy of libcontprof.a whose interposers are renamed (definitions and
    the references inside their own objects): every other reference to
    malloc, sigaction, pthread_create... then binds to libc. Linking them
    under their real names would route the extension's own allocations
    through the LD_PRELOAD allocator hooks, which look for the next malloc
    with dlsym and cannot work from inside a dlopen()ed module."""
    ar, nm = tool("ar", "ar"), tool("nm", "nm")
    objcopy = tool("objcopy", "objcopy")
    objs = os.path.join(work, "objs")
    shutil.rmtree(objs, ignore_errors=True)
    os.makedirs(objs)
    lib = os.path.abspath(lib)
    run([ar, "x", lib], cwd=objs)
    members = run([ar, "t", lib], echo=False).split()
    for member in members:
        path = os.path.join(objs, member)
        out = subprocess.check_output([nm, "-g", "--defined-only", path],
                                      universal_newlines=True)
        defined = {line.split()[-1] for line in out.splitlines() if line}
        renames = []
        for name in INTERPOSED:
            if name in defined:
                renames += ["--redefine-sym",
                            "%s=cp_python_unhooked_%s" % (name, name)]
        if renames:
            run([objcopy] + renames + [path])
    out = os.path.join(work, "libcontprof_python.a")
    if os.path.exists(out):
        os.unlink(out)
    run([ar, "rcs", out] + members, cwd=objs)
    return out


# --- the extension --------------------------------------------------------------


def build_extension(out_dir):
    """Builds contprof/_contprof<EXT_SUFFIX> into out_dir; returns its path.
    The compiler's output (warnings) goes to stdout."""
    check_interpreter()
    root = source_root()
    cc = compiler()
    include = sysconfig.get_config_var("INCLUDEPY")
    if not os.path.isfile(os.path.join(include or "", "Python.h")):
        raise BuildError(
            "Python.h was not found in %s (on Debian: apt-get install "
            "python%d.%d-dev)" % (include, *sys.version_info[:2]))
    work = build_root()
    lib = libcontprof(root, work)
    # This build's own files (objects, the renamed archive) in a directory of
    # its own: builds for several interpreters may run at once.
    tmp = tempfile.mkdtemp(prefix="contprof-ext-", dir=work)
    try:
        lib = unhooked_archive(lib, tmp)
        src = os.path.join(HERE, "contprof", "_contprof.c")
        obj = os.path.join(tmp, "_contprof.o")
        includes = [include]
        plat = sysconfig.get_path("platinclude")
        if plat and plat != include:
            includes.append(plat)
        includes += [os.path.join(root, "include"), os.path.join(root, "src")]
        env_flags = (shlex.split(os.environ.get("CPPFLAGS", "")) +
                     shlex.split(os.environ.get("CFLAGS", "")))
        log("compiling %s" % src)
        run(cc + config_cmd("CFLAGS") + config_cmd("CCSHARED") + env_flags +
            ["-I" + d for d in includes] + COMPILE_ARGS + ["-c", src, "-o",
                                                           obj],
            step="compiling contprof/_contprof.c")
        ldshared = config_cmd("LDSHARED") or cc + ["-shared"]
        if os.environ.get("CC"):
            # As distutils: $CC replaces the compiler that LDSHARED names.
            ldshared = cc + ldshared[1:]
        dest = os.path.join(out_dir, "contprof",
                            "_contprof" + sysconfig.get_config_var("EXT_SUFFIX"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        run(ldshared + shlex.split(os.environ.get("LDFLAGS", "")) +
            [obj, lib] + ["-l" + n for n in LIBRARIES] +
            ["-Wl,--exclude-libs,ALL",
             "-Wl,--version-script=" +
             os.path.join(HERE, "contprof", "_contprof.map"), "-o", dest],
            step="linking the extension", what="libcontprof's libraries may "
            "be missing (on Debian: apt-get install %s)" % LIB_PACKAGES)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --- archives -------------------------------------------------------------------


def zip_time():
    """Entries' time: SOURCE_DATE_EPOCH when set (reproducible wheels)."""
    t = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())))
    return max(t[:6], (1980, 1, 1, 0, 0, 0))


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (arcname, digest.rstrip(b"=").decode(),
                                len(data))


def write_wheel(wheel_directory, ext_path, ver):
    tag = wheel_tag()
    dist_info = "%s-%s.dist-info" % (NAME, ver)
    files = []  # (arcname, bytes, mode)
    for name in PACKAGE_FILES:
        with open(os.path.join(HERE, "contprof", name), "rb") as f:
            files.append(("contprof/" + name, f.read(), 0o644))
    with open(ext_path, "rb") as f:
        files.append(("contprof/" + os.path.basename(ext_path), f.read(),
                      0o755))
    files.append((dist_info + "/METADATA", metadata(ver).encode(), 0o644))
    files.append((dist_info + "/WHEEL",
                  ("Wheel-Version: 1.0\nGenerator: contprof_build %s\n"
                   "Root-Is-Purelib: false\nTag: %s\n" % (ver, tag)).encode(),
                  0o644))
    files.append((dist_info + "/top_level.txt", b"contprof\n", 0o644))
    record = "".join(record_line(a, d) + "\n" for a, d, _ in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode(), 0o644))
    name = "%s-%s-%s.whl" % (NAME, ver, tag)
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data, mode in files:
            info = zipfile.ZipInfo(arcname, zip_time())
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


# --- PEP 517 hooks ----------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    check_interpreter()
    ver = version()
    dist_info = os.path.join(metadata_directory,
                             "%s-%s.dist-info" % (NAME, ver))
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w",
              encoding="utf-8") as f:
        f.write(metadata(ver))
    return os.path.basename(dist_info)


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    ver = version()
    out = tempfile.mkdtemp(prefix="contprof-wheel-")
    try:
        ext = build_extension(out)
        name = write_wheel(wheel_directory, ext, ver)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    log("wrote %s" % name)
    return name


def build_sdist(sdist_directory, config_settings=None):
    """bindings/python plus, under libcontprof/, the parts of the repository
    that build libcontprof.a: the sdist builds on its own."""
    root = source_root()
    ver = version(root)
    base = "%s-%s" % (NAME, ver)
    name = base + ".tar.gz"
    skip = {"build", "__pycache__", "libcontprof", ".pytest_cache"}

    def add_tree(tar, src, arc):
        if os.path.isdir(src):
            for entry in sorted(os.listdir(src)):
                if entry in skip or entry.endswith(".pyc"):
                    continue
                add_tree(tar, os.path.join(src, entry), arc + "/" + entry)
        else:
            tar.add(src, arcname=arc, recursive=False)

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                      format=tarfile.PAX_FORMAT) as tar:
        add_tree(tar, HERE, base)
        for part in REPO_PARTS:
            add_tree(tar, os.path.join(root, part),
                     base + "/libcontprof/" + part)
        pkg_info = metadata(ver).encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        info.mtime = int(time.time())
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(pkg_info))
    return name
