"""A GGUF file's metadata and tensor table, read straight from the format (v2/v3, little
endian) with struct: what the tests need from a converted file without gguf-py's
GGUFReader, which builds a numpy view per element of every array and so spends about
half a minute on a 151k-token vocabulary (the converter tests read a dozen such files).
Where a test compares against gguf-py itself it still uses GGUFReader."""
import mmap
import struct

# GGUF value types: 0..12 as the format numbers them.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GgufHeader:
    """fields: key -> value (int, float, bool, str, or a list of them); tensors: name ->
    (ggml type number, shape as GGUF stores it, absolute data offset in the file)."""

    def __init__(self, path):
        with open(path, "rb") as f:  # mapped: only the pages read are touched
            self._b = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._o = 0
        magic, version = self._b[:4], self._u("<I", 4)
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        n_tensors, n_kv = self._u("<Q"), self._u("<Q")
        self.fields = {}
        for _ in range(n_kv):
            key = self._str()
            self.fields[key] = self._value(self._u("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            shape = [self._u("<Q") for _ in range(self._u("<I"))]
            infos.append((name, self._u("<I"), shape, self._u("<Q")))
        align = self.fields.get("general.alignment", 32)
        data = (self._o + align - 1) // align * align
        self.tensors = {n: (t, shape, data + off) for n, t, shape, off in infos}

    def _u(self, fmt, at=None):
        if at is not None:
            self._o = at
        (v,) = struct.unpack_from(fmt, self._b, self._o)
        self._o += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._u("<Q")
        s = bytes(self._b[self._o:self._o + n]).decode("utf-8")
        self._o += n
        return s

    def _value(self, t):
        if t == _STRING:
            return self._str()
        if t == _ARRAY:
            et, n = self._u("<I"), self._u("<Q")
            return [self._value(et) for _ in range(n)]
        return self._u(_SCALARS[t])

    def f32_tensor(self, name):
        """An F32 tensor's values (row-major, GGUF's shape reversed), as a numpy array."""
        import numpy as np
        t, shape, off = self.tensors[name]
        assert t == 0, f"{name} is ggml type {t}, not F32"
        n = 1
        for d in shape:
            n *= d
        return np.frombuffer(self._b, dtype="<f4", count=n, offset=off).reshape(shape[::-1])
