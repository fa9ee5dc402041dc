"""Routing: which bucket holds a key.

``bucket_of(key, buckets) = jump(fnv1a_64(key), buckets)``, the same function as the server's
and the Rust client's (``synod_kv::route``): 64-bit FNV-1a, then Lamping & Veach's jump
consistent hash. tests/test_routing.py pins both languages to one table.
"""

_MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_JUMP_MUL = 2862933555777941757


def fnv1a_64(data: bytes) -> int:
    """64-bit FNV-1a of ``data``."""
    h = _FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * _FNV_PRIME) & _MASK
    return h


def jump(key: int, buckets: int) -> int:
    """Jump consistent hash of a 64-bit ``key``: a bucket in ``range(buckets)``."""
    if buckets < 1:
        raise ValueError("jump hash needs a bucket")
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * _JUMP_MUL + 1) & _MASK
        # The same double-precision arithmetic as the reference (and the Rust code).
        j = int(float(b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def bucket_of(key: bytes, buckets: int) -> int:
    """The bucket index of ``key`` among ``buckets`` buckets."""
    return jump(fnv1a_64(key), buckets)
