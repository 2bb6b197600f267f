"""Allocation and live-heap profiles through PyMem_SetAllocator: measured
shares of known allocations, unbiased totals, live objects only in inuse."""
from conftest import runner
import pytest

WORKLOAD = '''
import contprof
contprof.start(profiles="alloc,heap", alloc_sample_bytes=65536,
               service="alloc")

def churn(n):
    for _ in range(n):
        b = bytes(4000)  # 4 KB, freed at once
    return b

def alloc_80(): churn(80000)   # 320 MB
def alloc_20(): churn(20000)   #  80 MB

kept = []
def keep():
    for _ in range(4000):
        kept.append(bytearray(5000))  # 20 MB still alive at export

alloc_20(); alloc_80(); keep()
contprof.stop()
'''


@pytest.fixture(scope="module")
def alloc_run(libdir, tmp_path_factory):
    return runner(libdir, tmp_path_factory.mktemp("alloc"))(WORKLOAD)


def test_allocation_shares(alloc_run):
    samples = alloc_run.samples()
    space = {f: sum(s.values.get("alloc-space", 0) for s in samples
                    if f in s.functions()) for f in ("alloc_80", "alloc_20")}
    both = sum(space.values())
    # 400 MB at a 64 KiB mean: about 6000 samples, so the standard error of
    # the 80% share is about 0.5 points.
    share = 100.0 * space["alloc_80"] / both
    assert abs(share - 80) <= 5, space
    # Unbiased: the estimated bytes match what was allocated (4000-byte
    # payloads plus object headers), within 10%.
    assert 0.9 * 400e6 < both < 1.1 * 400e6 * 1.02, both
    s = next(s for s in samples if "alloc_80" in s.functions())
    assert s.frames[0][0] == "churn"


def test_live_heap_has_only_live_objects(alloc_run):
    samples = alloc_run.samples()
    inuse = [s for s in samples if s.values.get("inuse-space", 0) > 0]
    kept = sum(s.values["inuse-space"] for s in inuse
               if "keep" in s.functions())
    churned = sum(s.values["inuse-space"] for s in inuse
                  if "churn" in s.functions())
    assert 0.75 * 20e6 < kept < 1.25 * 20e6, kept
    assert churned < 1e6, churned
