"""Builds contprof for Python: the package and its C extension, which links
libcontprof statically (built here with CMake from this repository, or taken
from CONTPROF_BUILD_DIR), so the installed package needs only system
libraries (libcurl, libunwind, libprotobuf-c, zlib) at run time.

    pip install --no-build-isolation ./bindings/python

Environment: CONTPROF_BUILD_DIR (a build directory of the repository that
holds libcontprof.a: reused instead of building one), CONTPROF_SOURCE_DIR
(the repository, when this directory was copied elsewhere).
"""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("CONTPROF_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(HERE))


# The functions libcontprof interposes (src/exports.map) for the native
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


def unhooked_archive(lib, work):
    """A copy of libcontprof.a whose interposers are renamed (definitions and
    the references inside their own objects): every other reference to
    malloc, sigaction, pthread_create... then binds to libc. Linking them
    under their real names would route the extension's own allocations
    through the LD_PRELOAD allocator hooks, which look for the next malloc
    with dlsym and cannot work from inside a dlopen()ed module."""
    objs = os.path.join(work, "objs")
    shutil.rmtree(objs, ignore_errors=True)
    os.makedirs(objs)
    subprocess.check_call(["ar", "x", os.path.abspath(lib)], cwd=objs)
    members = subprocess.check_output(["ar", "t", lib], text=True).split()
    for member in members:
        path = os.path.join(objs, member)
        out = subprocess.check_output(["nm", "-g", "--defined-only", path],
                                      text=True)
        defined = {line.split()[-1] for line in out.splitlines() if line}
        renames = []
        for name in INTERPOSED:
            if name in defined:
                renames += ["--redefine-sym",
                            "%s=cp_python_unhooked_%s" % (name, name)]
        if renames:
            subprocess.check_call(["objcopy"] + renames + [path])
    out = os.path.join(work, "libcontprof_python.a")
    if os.path.exists(out):
        os.unlink(out)
    subprocess.check_call(["ar", "rcs", out] + members, cwd=objs)
    return out


class BuildExt(build_ext):
    """Builds (or finds) libcontprof.a before the extension that links it."""

    def run(self):
        if not os.path.isfile(os.path.join(ROOT, "include", "contprof",
                                           "runtime.h")):
            raise SystemExit(
                "contprof: the repository was not found at %s; set "
                "CONTPROF_SOURCE_DIR" % ROOT)
        build_dir = os.environ.get("CONTPROF_BUILD_DIR")
        if not build_dir:
            build_dir = os.path.abspath(os.path.join(self.build_temp,
                                                     "libcontprof"))
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir,
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                "-DCONTPROF_BUILD_TESTS=OFF"
            ])
            subprocess.check_call([
                "cmake", "--build", build_dir, "--target", "contprof_static",
                "-j%d" % (os.cpu_count() or 1)
            ])
        lib = os.path.join(build_dir, "libcontprof.a")
        if not os.path.isfile(lib):
            raise SystemExit("contprof: %s is missing (run scripts/build, or "
                             "unset CONTPROF_BUILD_DIR)" % lib)
        os.makedirs(self.build_temp, exist_ok=True)
        lib = unhooked_archive(lib, os.path.abspath(self.build_temp))
        for ext in self.extensions:
            ext.extra_objects = [lib]
            ext.include_dirs += [
                os.path.join(ROOT, "include"),
                os.path.join(ROOT, "src")
            ]
            ext.depends = [lib]
        super().run()


setup(
    name="contprof",
    version="0.1.0",
    description="contprof: always-on profiler for Python (CPU, wall, "
    "allocations, live heap) with Datadog and Pyroscope uploads",
    packages=["contprof"],
    python_requires=">=3.8",
    ext_modules=[
        Extension(
            "contprof._contprof",
            sources=["contprof/_contprof.c"],
            depends=["contprof/_contprof.map"],
            extra_compile_args=["-std=gnu11", "-Wall", "-Wextra",
                                "-Wno-missing-field-initializers"],
            extra_link_args=[
                "-Wl,--exclude-libs,ALL",
                "-Wl,--version-script=" +
                os.path.join(HERE, "contprof", "_contprof.map"),
            ],
            libraries=["unwind", "protobuf-c", "curl", "z", "dl", "m",
                       "pthread"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
