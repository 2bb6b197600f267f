"""Labels and span ids that follow contexts (asyncio tasks), and the
`task name` label.

contprof.labels keeps each context's labels in a ContextVar, as a held
libcontprof label set, and sets the thread's labels (what samples read) to
it. asyncio runs every callback, task steps included, inside a Context
(asyncio.events.Handle._run: self._context.run(...)); while profiling,
Handle._run is wrapped so that the thread carries the labels and span ids
of the callback's context, plus `task name` when the callback is a step of
a task, for the duration of the callback, and gets its own back after it.
docs/python.md, "asyncio", says why this design and what it costs.
"""
import contextvars
import importlib.machinery
import sys
import time

from . import _contprof

# Datadog's label key (dd-trace-py names it so; docs/formats.md keeps keys
# with spaces as they are).
TASK_NAME = "task name"

_LABELS = contextvars.ContextVar("contprof.labels", default=None)
# contprof.set_span's (span id, local root span id), or None: per context
# like the labels, so that interleaving tasks keep their own.
_SPAN = contextvars.ContextVar("contprof.span", default=None)


class LabelSet:
    """One label set of libcontprof, held while this object lives: the value
    of the _LABELS context variable (parent: the set it was made from, which
    a labels block restores when it is left; owner: that block)."""
    __slots__ = ("id", "parent", "owner")

    def __init__(self, id_, parent=None, owner=None):
        self.id = id_
        self.parent = parent
        self.owner = owner

    def __del__(self, release=_contprof.labels_release):
        try:
            release(self.id)
        except Exception:  # interpreter teardown
            pass


def current():
    """This context's label set, or None."""
    return _LABELS.get()


def make(base, items, owner=None):
    """base's labels (a LabelSet or None) with items added."""
    return LabelSet(
        _contprof.labels_make(base.id if base is not None else 0, items),
        base, owner)


_wrapped = None  # (asyncio.events.Handle, its original _run) while wrapped
_get_running_loop = None
_current_task = None


def set_context(new):
    """The current context's labels become new (a LabelSet or None), and so
    do the thread's (with the running task's name)."""
    _LABELS.set(new)
    task = None
    if _wrapped is not None:
        loop = _get_running_loop()
        if loop is not None:
            task = _current_task(loop)
    _contprof.labels_set_task(task, new)


# New `task name` sets per second, and the burst allowed: libcontprof's
# label table holds 65535 sets, each kept two profiles after its last use,
# so a program that starts thousands of tasks a second must not fill it
# with task names (labels blocks would then be refused). Beyond the rate,
# a new task runs without its name.
TASK_SETS_PER_S = 200.0
TASK_SETS_BURST = 2000.0
_budget = [TASK_SETS_BURST, time.monotonic()]


def _may_make_task_set():
    now = time.monotonic()
    tokens = min(TASK_SETS_BURST,
                 _budget[0] + (now - _budget[1]) * TASK_SETS_PER_S)
    _budget[1] = now
    if tokens < 1.0:
        _budget[0] = tokens
        return False
    _budget[0] = tokens - 1.0
    return True


def _task_set(task, base):
    """The id of base (the task's context labels) with the task's name,
    cached on the task as (base, name, LabelSet or None, id, previous
    entry) while base and the name stay the same (_contprof's Handle._run
    and labels_set_task read it too). Two entries: a labels block inside
    the task switches between its set and the outer one."""
    base_id = base.id if base is not None else 0
    try:
        name = task.get_name()
    except Exception:
        return base_id
    cached = getattr(task, "_contprof_labels", None)
    if cached is not None:
        if cached[0] is base and cached[1] == name:
            return cached[3]
        prev = cached[4]
        if prev is not None and prev[0] is base and prev[1] == name:
            entry = prev[:4] + (cached[:4] + (None, ), )
            _set_cache(task, entry)
            return entry[3]
    made = None
    if _may_make_task_set():
        try:
            made = make(base, ((TASK_NAME, str(name)), ))
        except ValueError:  # the table is full: said by libcontprof
            pass
    entry = (base, name, made, made.id if made is not None else base_id,
             cached[:4] + (None, ) if cached is not None else None)
    _set_cache(task, entry)
    return entry[3]


def _set_cache(task, entry):
    try:
        task._contprof_labels = entry
    except AttributeError:  # a Task subclass with __slots__: not cached
        pass


_said_cannot_wrap = []  # the line below, once per process


def _wrap(events):
    """Wraps events.Handle._run; False (and one line) if it cannot."""
    global _wrapped, _get_running_loop, _current_task
    handle = getattr(events, "Handle", None)
    run = getattr(handle, "_run", None) if handle is not None else None
    slots = getattr(handle, "__slots__", ())
    if (run is None or not hasattr(run, "__code__")
            or "_context" not in slots or "_callback" not in slots):
        if _said_cannot_wrap:
            return False
        _said_cannot_wrap.append(True)
        sys.stderr.write(
            "contprof: asyncio.events.Handle._run is not the one expected "
            "on Python %d.%d: labels follow the thread, not the asyncio "
            "task, and samples have no task name\n" % sys.version_info[:2])
        return False
    if _wrapped is not None and _wrapped[0] is handle:
        return True  # already ours
    tasks = sys.modules.get("asyncio.tasks")
    _get_running_loop = events._get_running_loop
    _current_task = getattr(tasks, "current_task", None) if tasks else None
    if _current_task is None:  # asyncio.tasks not imported yet: later
        def _current_task(loop):
            return sys.modules["asyncio.tasks"].current_task(loop)

    _contprof.asyncio_setup(_LABELS, _task_set, _SPAN)
    handle._run = _contprof.asyncio_method(run)
    _wrapped = (handle, run)
    return True


class _Finder:
    """Wraps Handle._run when asyncio.events is first imported (the profiler
    usually starts before the application imports asyncio)."""

    def find_spec(self, name, path=None, target=None):
        if name != "asyncio.events":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return None

        def exec_and_wrap(module):
            exec_module(module)
            if _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
                _wrap(module)

        loader.exec_module = exec_and_wrap
        return spec

    def invalidate_caches(self):
        pass


_finder = _Finder()


def install():
    """At start: labels follow asyncio tasks from now on."""
    events = sys.modules.get("asyncio.events")
    if events is not None:
        _wrap(events)
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def uninstall():
    """At stop: Handle._run is asyncio's own again."""
    global _wrapped
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    if _wrapped is not None:
        handle, run = _wrapped
        handle._run = run
        _wrapped = None
