"""A small pprof reader for the tests (and bench/stack_stats.py, which reads
the wire format with _fields and _ints): gzip + protobuf wire format decoded
by hand (no PyPI). Only the fields the tests need (profile.proto)."""
import gzip


def _varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of one message; value is an int or
    bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wt == 1:
            v = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wt == 5:
            v = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def _ints(wt, v):
    """A repeated integer field: packed (bytes) or one varint."""
    if wt != 2:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _signed(x):
    return x - (1 << 64) if x >= 1 << 63 else x


class Sample:
    def __init__(self, frames, values, labels):
        self.frames = frames  # leaf first: (function, file, line)
        self.values = values  # {sample type: value}
        self.labels = labels  # {key: str or int}

    def functions(self):
        return [f[0] for f in self.frames]


class Profile:
    def __init__(self, data):
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        strings, types, raw_samples = [], [], []
        locations, functions, comments = {}, {}, []
        for num, wt, v in _fields(data):
            if num == 6:
                strings.append(v.decode("utf-8", "replace"))
            elif num == 1:
                t = dict((n, x) for n, _, x in _fields(v))
                types.append((t.get(1, 0), t.get(2, 0)))
            elif num == 2:
                raw_samples.append(v)
            elif num == 4:
                loc_id, lines = 0, []
                for n, w, x in _fields(v):
                    if n == 1:
                        loc_id = x
                    elif n == 4:
                        ln = dict((a, b) for a, _, b in _fields(x))
                        lines.append((ln.get(1, 0), _signed(ln.get(2, 0))))
                locations[loc_id] = lines
            elif num == 5:
                f = dict((n, x) for n, _, x in _fields(v))
                functions[f.get(1, 0)] = (f.get(2, 0), f.get(4, 0))
            elif num == 13:
                comments += _ints(wt, v)
        self.strings = strings
        self.sample_types = [strings[t] for t, _ in types]
        self.comments = [strings[c] for c in comments]
        self.samples = []
        for raw in raw_samples:
            locs, vals, labels = [], [], {}
            for n, w, x in _fields(raw):
                if n == 1:
                    locs += _ints(w, x)
                elif n == 2:
                    vals += [_signed(y) for y in _ints(w, x)]
                elif n == 3:
                    lab = dict((a, b) for a, _, b in _fields(x))
                    key = strings[lab.get(1, 0)]
                    labels[key] = (strings[lab[2]] if lab.get(2)
                                   else _signed(lab.get(3, 0)))
            frames = []
            for loc in locs:
                # Inlined lines come last-first within one location.
                for fid, line in locations.get(loc, []):
                    name, fname = functions.get(fid, (0, 0))
                    frames.append((strings[name], strings[fname], line))
            self.samples.append(
                Sample(frames, dict(zip(self.sample_types, vals)), labels))

    def comment(self, key):
        for c in self.comments:
            if c.startswith(key + "="):
                return c[len(key) + 1:]
        return None

    def total(self, sample_type, where=lambda s: True):
        return sum(s.values.get(sample_type, 0) for s in self.samples
                   if where(s))


def read(path):
    with open(path, "rb") as f:
        return Profile(f.read())


def merged(paths, sample_type):
    """All samples of several profiles (one process), for totals."""
    out = []
    for p in paths:
        out += read(p).samples
    return out
