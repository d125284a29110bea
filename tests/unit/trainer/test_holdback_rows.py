import pyarrow as pa

from trainer.data import without_holdback


def _rows(versions):
    return pa.table({"model_version": pa.array(versions, pa.int64()),
                     "reward": pa.array([0.5] * len(versions), pa.float32())})


def test_anchor_rows_are_left_out_while_the_anchor_is_not_the_champion():
    kept, left = without_holdback(_rows([1, 3, 3, 1, 2]), anchor_version=1, champion_version=3)
    assert left == 2 and kept["model_version"].to_pylist() == [3, 3, 2]


def test_while_the_anchor_is_the_champion_its_rows_are_its_own_traffic():
    rows = _rows([1, 1, 2])
    assert without_holdback(rows, anchor_version=1, champion_version=1) == (rows, 0)
    assert without_holdback(rows, anchor_version=None, champion_version=1) == (rows, 0)
