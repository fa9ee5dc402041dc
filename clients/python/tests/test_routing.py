"""Key -> bucket, pinned to the table shared with the Rust client
(crates/kv-client/tests/data/routing_parity.tsv, asserted by
crates/kv-client/tests/routing_parity.rs): both languages and the server must agree."""

from pathlib import Path

import pytest

from synod_kv.route import bucket_of, fnv1a_64, jump

TABLE = (
    Path(__file__).resolve().parents[3] / "crates" / "kv-client" / "tests" / "data" / "routing_parity.tsv"
)


def rows():
    for line in TABLE.read_text().splitlines():
        if not line.startswith("#"):
            key, b1, b3, b8 = line.split("\t")
            yield bytes.fromhex(key), int(b1), int(b3), int(b8)


def test_the_table_has_200_keys():
    assert len(list(rows())) == 200


@pytest.mark.parametrize("buckets,column", [(1, 1), (3, 2), (8, 3)])
def test_buckets_match_the_shared_table(buckets, column):
    for row in rows():
        assert bucket_of(row[0], buckets) == row[column], (row[0].hex(), buckets)


def test_fnv1a_reference_values():
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_jump_stays_in_range_and_moves_few_keys():
    keys = [fnv1a_64(f"k{i}".encode()) for i in range(2000)]
    for n in (1, 2, 7, 100):
        assert all(0 <= jump(k, n) < n for k in keys)
    moved = sum(jump(k, 10) != jump(k, 11) for k in keys)
    assert moved < len(keys) * 2 / 11  # about 1/11 of the keys move to the new bucket
    assert all(jump(k, 11) in (jump(k, 10), 10) for k in keys)
    with pytest.raises(ValueError):
        jump(1, 0)
