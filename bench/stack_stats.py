#!/usr/bin/env python3
"""How concentrated a profile's stacks are, for bench/storage.sh: what the
call tree's size depends on, so that a real profile (say one contprof wrote
for a real program) can be set against the simulated mixes of
bench/storage.c at the same number of samples.

  bench/stack_stats.py [--catalogue OUT] FILE.pb.gz [TYPE]
                                   (TYPE: cpu-samples by default)

Prints the samples (sum of TYPE), distinct stacks, call-tree nodes (distinct
root-to-frame prefixes), rows (pprof samples: stack x thread x labels), each
also per sample, the share of samples in the 1% and 10% most frequent
stacks, and the exponent of a Zipf law fitted (least squares, log-log) to
the stacks' rank-frequency over their top ranks. --catalogue writes the stacks
with their weights ("WEIGHT LOC..." a line, location ids leaf first), which
bench/storage.c replays as its "replay" mix. Reads the pprof wire format with
the Python tests' reader (no protobuf module needed); FILE may also be a catalogue
(.cat or .cat.gz)."""
import gzip
import math
import os
import sys


# The pprof wire format is read by the Python tests' reader.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "bindings", "python", "tests"))
from pprof import _fields as fields, _ints as ints  # noqa: E402


def main():
    args = sys.argv[1:]
    catalogue = None
    if args[:1] == ["--catalogue"]:
        catalogue, args = args[1], args[2:]
    path = args[0]
    want = args[1] if len(args) > 1 else "cpu-samples"
    data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    strings, types, samples = [], [], []
    if ".cat" in path:  # a catalogue: "WEIGHT LOC..." lines, one row each
        for line in data.decode().splitlines():
            w = line.split()
            if w:
                samples.append((tuple(map(int, w[1:])), [int(w[0])], ()))
        data = b""
    for num, wt, v in fields(data):
        if num == 6:
            strings.append(v.decode("utf-8", "replace"))
        elif num == 1:
            t = dict((n, x) for n, _, x in fields(v))
            types.append(t.get(1, 0))
        elif num == 2:
            locs, values, labels = [], [], []
            for n, w, x in fields(v):
                if n == 1:
                    locs += ints(w, x)
                elif n == 2:
                    values += ints(w, x)
                elif n == 3:
                    labels.append(tuple(sorted(
                        (k, y if isinstance(y, int) else bytes(y)) for k, _, y in fields(x))))
            samples.append((tuple(locs), values, tuple(sorted(labels))))
    names = [strings[t] for t in types]
    col = names.index(want) if want in names else 0
    total = 0
    stacks, nodes = {}, set()
    rows = 0
    for locs, values, _ in samples:
        v = values[col] if col < len(values) else 0
        if v <= 0:
            continue
        v -= (v >> 63) << 64  # int64
        rows += 1
        total += v
        stacks[locs] = stacks.get(locs, 0) + v
    for locs in stacks:
        for d in range(1, len(locs) + 1):
            nodes.add(locs[-d:])  # root-side suffix of the leaf-first list
    if catalogue:
        with open(catalogue, "w") as out:
            for locs, v in sorted(stacks.items(), key=lambda kv: -kv[1]):
                out.write("%d %s\n" % (v, " ".join(map(str, locs))))
    counts = sorted(stacks.values(), reverse=True)
    top = lambda frac: sum(counts[:max(1, int(len(counts) * frac))]) / total
    # Zipf exponent: slope of log(count) on log(rank) over the top ranks
    # (at most the first 1,000, and only counts of 2 or more: singletons are
    # the sampling floor, not the law).
    pts = [(math.log(r + 1), math.log(c)) for r, c in enumerate(counts[:1000]) if c >= 2]
    s = float("nan")
    if len(pts) >= 10:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        s = -sum((x - mx) * (y - my) for x, y in pts) / sxx
    print("STACKS file=%s type=%s samples=%d stacks=%d nodes=%d rows=%d "
          "stacks_per_sample=%.3f nodes_per_sample=%.3f rows_per_sample=%.3f "
          "top1pct_share=%.3f top10pct_share=%.3f zipf_s_fit=%.2f (%d ranks)"
          % (path, names[col] if names else "?", total, len(stacks), len(nodes), rows,
             len(stacks) / total, len(nodes) / total, rows / total,
             top(0.01), top(0.10), s, len(pts)))


if __name__ == "__main__":
    main()
