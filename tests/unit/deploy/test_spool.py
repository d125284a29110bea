from deploy.replica import spool as spool_mod
from deploy.replica.spool import Spool


def _recs(n, start=0):
    return [
        ("topic.a", f"k{i}".encode(), f'{{"i": {i}, "s": "a\\tb\\nc"}}'.encode())
        for i in range(start, start + n)
    ]


def test_fifo_peek_commit(tmp_path):
    s = Spool(tmp_path, max_bytes=1 << 20)
    assert s.append(_recs(5)) == 5
    assert s.depth == 5
    batch = s.peek(3)
    assert batch.records == _recs(3)
    assert s.depth == 5  # peek does not consume
    s.commit(batch)
    assert s.depth == 2
    assert s.peek(10).records == _recs(2, start=3)


def test_bound_refuses_what_does_not_fit(tmp_path):
    one = len(spool_mod._encode(_recs(1)[0]))
    s = Spool(tmp_path, max_bytes=one * 3 + 1)
    assert s.append(_recs(5)) == 3
    s.commit(s.peek(2))
    assert s.append(_recs(5, start=5)) == 2
    assert [r[1] for r in s.peek(10).records] == [b"k2", b"k5", b"k6"]


def test_reopen_resumes_after_the_cursor(tmp_path):
    s = Spool(tmp_path, max_bytes=1 << 20)
    s.append(_recs(4))
    s.commit(s.peek(1))
    s.close()
    again = Spool(tmp_path, max_bytes=1 << 20)
    assert again.depth == 3
    assert again.peek(10).records == _recs(3, start=1)


def test_segments_roll_and_are_deleted(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_mod, "_SEGMENT_BYTES", 200)
    s = Spool(tmp_path, max_bytes=1 << 20)
    s.append(_recs(30))
    assert len(list(tmp_path.glob("seg-*.log"))) > 3
    got = []
    while s.depth:
        batch = s.peek(7)
        got += batch.records
        s.commit(batch)
    assert got == _recs(30)
    assert len(list(tmp_path.glob("seg-*.log"))) == 1  # only the fresh, empty one
    s.append(_recs(1, start=99))
    assert s.peek(5).records == _recs(1, start=99)
