"""What crosses the shuffle: a batch's ``(key, value)`` pairs packed per bucket of the key, one
bytes blob each, and read back in the same order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.transforms import _packed, _unpacked, bucket_of


def test_pairs_are_packed_per_bucket_in_order():
    # crc32: "a" 0xe8b7be43, "b" 0x71beeff9, "r1" 0x0d0e09b1 -> buckets 3, 25, 17 (mod 32)
    pairs = [("a", 1), ("b", (2, b"x")), ("a", 3), ("r1", "s"), ("b", None)]
    packed = dict(_packed(pairs))
    assert set(packed) == {3, 25, 17}
    assert all(isinstance(blob, bytes) for blob in packed.values())
    assert list(_unpacked([packed[3]])) == [("a", 1), ("a", 3)]
    assert list(_unpacked([packed[25]])) == [("b", (2, b"x")), ("b", None)]
    assert list(_unpacked([packed[17]])) == [("r1", "s")]
    assert list(_unpacked([packed[3], packed[17]])) == [("a", 1), ("a", 3), ("r1", "s")]
    assert list(_packed([])) == []


@given(st.lists(st.tuples(st.text(max_size=8), st.integers() | st.binary(max_size=8))))
def test_unpacking_every_bucket_gives_back_each_key_s_pairs_in_order(pairs):
    packed = list(_packed(pairs))
    assert len({bucket for bucket, _ in packed}) == len(packed)
    back = [pair for bucket, blob in packed for pair in _unpacked([blob])]
    assert all(bucket_of(k) == bucket for bucket, blob in packed for k, _ in _unpacked([blob]))
    assert sorted(back, key=repr) == sorted(pairs, key=repr)
    for key in {k for k, _ in pairs}:
        assert [p for p in back if p[0] == key] == [p for p in pairs if p[0] == key]
