"""contprof for Python: an always-on, in-process profiler of Python code.

    import contprof
    contprof.start(service="checkout", profiles="cpu,wall,alloc,heap")
    with contprof.labels(endpoint="/checkout"):
        handle()
    contprof.stop()

Options take the names of the environment variables in
docs/configuration.md without their prefix (service=CONTPROF_SERVICE,
cpu_hz=CONTPROF_CPU_HZ, ...); an option given here wins over the
environment, an omitted one is read from it, with the same parsing, defaults
and `contprof:` warnings. Any other variable can be passed by its name in
options={"DD_TRACE_AGENT_URL": "http://127.0.0.1:8126"}.
"""
import atexit
import functools
import os
import sys
import sysconfig

from ._support import unsupported as _unsupported

# A free-threaded build (3.13t) is refused here with the same line as at
# build time, not left to whatever the extension's import would say.
_refused = _unsupported(sys.version_info,
                        sysconfig.get_config_var("Py_GIL_DISABLED"))
if _refused:
    raise ImportError(_refused)

from . import _contprof  # noqa: E402
from . import _tasks  # noqa: E402

__all__ = [
    "ProfilerError", "start", "stop", "flush", "is_running", "overhead",
    "labels",
    "set_span", "set_endpoint", "OPTIONS"
]
__version__ = _contprof.VERSION

# Keyword argument -> environment variable.
OPTIONS = {
    "service": "CONTPROF_SERVICE",
    "env": "CONTPROF_ENV",
    "version": "CONTPROF_VERSION",
    "tags": "CONTPROF_TAGS",
    "profiles": "CONTPROF_PROFILES",
    "output_dir": "CONTPROF_OUTPUT_DIR",
    "log_level": "CONTPROF_LOG_LEVEL",
    "cpu_hz": "CONTPROF_CPU_HZ",
    "max_frames": "CONTPROF_MAX_FRAMES",
    "upload_period": "CONTPROF_UPLOAD_PERIOD",
    "max_memory_mb": "CONTPROF_MAX_MEMORY_MB",
    "wall_interval_ms": "CONTPROF_WALL_INTERVAL_MS",
    "alloc_sample_bytes": "CONTPROF_ALLOC_SAMPLE_BYTES",
    "heap_max_tracked": "CONTPROF_HEAP_MAX_TRACKED",
    "timeline": "CONTPROF_TIMELINE",
    "follow_fork": "CONTPROF_FOLLOW_FORK",
    "enabled": "CONTPROF_ENABLED",
    "export": "CONTPROF_EXPORT",
    "agent_url": "DD_TRACE_AGENT_URL",
    "api_key": "DD_API_KEY",
    "site": "DD_SITE",
    "pyroscope_url": "PYROSCOPE_SERVER_ADDRESS",
    "spool_dir": "CONTPROF_SPOOL_DIR",
    "python_native": "CONTPROF_PYTHON_NATIVE",
    "python_reads": "CONTPROF_PYTHON_READS",
}


class ProfilerError(RuntimeError):
    """start, stop or flush failed; .status is libcontprof's status code."""

    def __init__(self, status):
        super().__init__("contprof: " + _contprof.strerror(status))
        self.status = status


def _as_option(name, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        sep = "=" if name == "PYROSCOPE_LABELS" else ":"
        return ",".join("%s%s%s" % (k, sep, v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return str(value)


_hooks_registered = False


def start(options=None, **kwargs):
    """Starts profiling this process. Returns True, or False when
    CONTPROF_ENABLED (or enabled=False) disables profiling. Raises
    ProfilerError if the profiler is already running."""
    global _hooks_registered
    values = {}
    for key, value in kwargs.items():
        if key not in OPTIONS:
            raise TypeError("contprof.start() got an unknown option %r" % key)
        if value is not None:
            values[OPTIONS[key]] = _as_option(OPTIONS[key], value)
    for name, value in (options or {}).items():
        if value is not None:
            values[str(name)] = _as_option(str(name), value)
    status = _contprof.start(values)
    if status == _contprof.ERR_DISABLED:
        return False
    if status != _contprof.OK:
        raise ProfilerError(status)
    _tasks.install()
    if not _hooks_registered:
        atexit.register(_stop_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_child)
        _hooks_registered = True
    return True


def stop():
    """Stops profiling and writes (uploads) the last profile. Returns False
    if the profiler was not running."""
    _tasks.uninstall()
    status = _contprof.stop()
    if status == _contprof.ERR_NOT_STARTED:
        return False
    if status != _contprof.OK:
        raise ProfilerError(status)
    return True


def _stop_at_exit():
    _tasks.uninstall()
    _contprof.stop()


class _ForkKey:
    """Kept alive for multiprocessing.util's weak after-fork registry."""


_FORK_KEY = _ForkKey()


def _after_fork_child():
    _contprof.after_fork_child()
    if not _contprof.is_running():  # CONTPROF_FOLLOW_FORK=0
        _tasks.uninstall()
    # A multiprocessing child leaves with os._exit after its finalizers, not
    # atexit: stop (write the last profile) in a finalizer. Its registry is
    # cleared when the child starts, so register from the after-fork hook
    # that runs after that.
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and _contprof.is_running():
        mp_util.register_after_fork(
            _FORK_KEY, lambda _key: mp_util.Finalize(
                None, _stop_at_exit, exitpriority=-100))


def flush():
    """Ends the current period now: its samples become one profile."""
    status = _contprof.flush()
    if status != _contprof.OK:
        raise ProfilerError(status)


def is_running():
    return _contprof.is_running()


def overhead(since_start=False):
    """What the profiler cost in the period of the last profile written
    (zeros before the first), or with since_start=True summed since it
    started: a dict named like the profiles' comments (docs/overhead.md):
    profiler_cpu_ns, profiler_overhead_pct, samples, drops,
    profiler_rss_bytes, max_overhead_pct, ... and under "profiles" each
    profile type's samples, drops, thinned, hooks_ns, kernel_ns,
    threads_cpu_ns, sampling (the rate in force: cpu in Hz, wall in ms,
    alloc and heap in bytes, lock in ns), slowdown and slowdown_max."""
    return _contprof.overhead(bool(since_start))


class labels:
    """Labels every sample taken inside the block:

        with contprof.labels(endpoint="/checkout", tenant="acme"):
            ...

    or as a decorator (@contprof.labels(endpoint="/checkout")). Labels
    belong to the current context (contextvars): a thread's, or an asyncio
    task's, which keeps its labels across awaits while other tasks on the
    same thread run with theirs. A task created inside the block inherits
    them (it starts with a copy of the context)."""

    def __init__(self, **kv):
        self._items = tuple((str(k), str(v)) for k, v in kv.items())

    def __enter__(self):
        _tasks.set_context(_tasks.make(_tasks.current(), self._items, self))
        return self

    def __exit__(self, *exc):
        # The innermost set this block made in this context; blocks left out
        # of order (rare) drop the ones made inside them too.
        s = _tasks.current()
        while s is not None and s.owner is not self:
            s = s.parent
        if s is not None:
            _tasks.set_context(s.parent)
        return False

    def __call__(self, func):
        items = dict(self._items)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with labels(**items):
                return func(*args, **kwargs)

        return wrapper


def set_span(span_id, local_root_span_id=None):
    """Trace correlation: the current span id and the id of its request's
    first span in this process (default: span_id). Every sample taken on
    this thread carries them until the next call, and in asyncio only
    while this task (this context) runs; set_span(0, 0) clears them."""
    if local_root_span_id is None:
        local_root_span_id = span_id
    span, root = int(span_id), int(local_root_span_id)
    _tasks._SPAN.set((span, root) if span or root else None)
    _contprof.set_span(span, root)


def set_endpoint(local_root_span_id, endpoint):
    """Names the endpoint (resource) of a local root span: its samples get a
    `trace endpoint` label and the request counts in endpoint_counts."""
    status = _contprof.set_endpoint(int(local_root_span_id), str(endpoint))
    if status != _contprof.OK:
        raise ValueError("contprof: " + _contprof.strerror(status))
