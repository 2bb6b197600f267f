"""Which interpreters contprof can be built for and imported into: one
decision, shared by the build backend (backend/contprof_build.py, which
loads this file by path) and by the package's import. Imports nothing."""

MIN_VERSION = (3, 8)


def unsupported(version_info, gil_disabled):
    """The one `contprof:` line that refuses this interpreter, or None.

    version_info: sys.version_info (or a tuple); gil_disabled: sysconfig's
    Py_GIL_DISABLED (1 on a free-threaded 3.13t/3.14t build, else 0 or
    None). The extension reads the interpreter's frames and thread states,
    and a free-threaded build lays them out differently (per-thread
    bytecode, no GIL for the allocation hooks and the fallback sampler): it
    is refused rather than misread. A layout the extension cannot verify
    (3.13+: _PyRuntime.debug_offsets) is found at start by the extension,
    which then says so in one line and samples no Python stacks."""
    if tuple(version_info[:2]) < MIN_VERSION:
        return ("contprof: CPython %d.%d is not supported (3.8 or newer is "
                "needed)" % tuple(version_info[:2]))
    if gil_disabled:
        return ("contprof: the free-threaded CPython build (%d.%dt, "
                "Py_GIL_DISABLED) is not supported yet; use the default "
                "build of CPython" % tuple(version_info[:2]))
    return None
