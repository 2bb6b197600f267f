"""fork: the child profiles itself (own pid, runtime-id, no samples of the
parent); the parent is unaffected."""
import os

from conftest import BURN
import pprof

WORKLOAD = BURN + '''
import os, sys
import contprof
contprof.start(profiles="cpu,wall", service="forky")

def parent_before(): burn(0.4)
def child_work(): burn(0.5)
def parent_after(): burn(0.4)

parent_before()
scope = contprof.labels(phase="forked")
scope.__enter__()
pid = os.fork()
if pid == 0:
    child_work()
    contprof.stop()
    os._exit(0)
scope.__exit__(None, None, None)
parent_after()
_, status = os.waitpid(pid, 0)
assert status == 0, status
contprof.stop()
print(pid)
'''


def test_fork_child_profiles_itself(run_py):
    run = run_py(WORKLOAD)
    child_pid = int(run.proc.stdout.split()[-1])
    by_pid = {}
    for f in run.files():
        p = pprof.read(f)
        by_pid.setdefault(int(p.comment("process_id")), []).append(p)
    parent_pid = next(pid for pid in by_pid if pid != child_pid)
    assert set(by_pid) == {parent_pid, child_pid}, by_pid.keys()

    def cpu_of(profiles, fn):
        return sum(s.values.get("cpu-time", 0) for p in profiles
                   for s in p.samples if fn in s.functions())

    child, parent = by_pid[child_pid], by_pid[parent_pid]
    assert cpu_of(child, "child_work") > 0.3e9
    assert cpu_of(child, "parent_before") == 0
    assert cpu_of(child, "parent_after") == 0
    assert cpu_of(parent, "child_work") == 0
    assert cpu_of(parent, "parent_before") > 0.25e9
    assert cpu_of(parent, "parent_after") > 0.25e9
    # Labels set before fork stay on the forking thread in the child.
    assert all(s.labels.get("phase") == "forked" for p in child
               for s in p.samples if "child_work" in s.functions())
    assert not any("phase" in s.labels for p in parent for s in p.samples
                   if "parent_after" in s.functions())
    ids = {p.comment("runtime-id") for p in child}
    assert len(ids) == 1
    assert ids.isdisjoint({p.comment("runtime-id") for p in parent})
    assert all(s.labels.get("thread id") == child_pid for p in child
               for s in p.samples if s.values.get("cpu-time"))
    assert os.path.basename(run.files()[0]).startswith("forky.")


MP_WORKLOAD = BURN + '''
import multiprocessing, os
import contprof
contprof.start(service="mp")

def mp_child_work():
    burn(0.4)

def child():
    mp_child_work()

if __name__ == "__main__":
    p = multiprocessing.get_context("fork").Process(target=child)
    p.start(); p.join()
    assert p.exitcode == 0
    contprof.stop()
    print(p.pid)
'''


def test_multiprocessing_child_writes_its_profile(run_py):
    run = run_py(MP_WORKLOAD)
    child_pid = int(run.proc.stdout.split()[-1])
    child = [pprof.read(f) for f in run.files()
             if ".%d." % child_pid in os.path.basename(f)]
    assert len(child) == 1, run.files()
    cpu = child[0].total("cpu-time",
                         lambda s: "mp_child_work" in s.functions())
    assert cpu > 0.3e9
