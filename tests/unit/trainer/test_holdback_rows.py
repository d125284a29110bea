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


def test_rows_that_record_their_arm_are_left_out_by_it_also_while_the_anchor_is_champion():
    rows = _rows([1, 1, 1, 1]).append_column(
        "arm", pa.array(["stable", "holdback", None, "canary"], pa.string()))
    kept, left = without_holdback(rows, anchor_version=1, champion_version=1)
    assert left == 1 and kept["arm"].to_pylist() == ["stable", None, "canary"]
    # after a promotion: the holdback's arm and the anchor's unrouted rows are left out
    rows = _rows([1, 3, 1, 3]).append_column(
        "arm", pa.array(["holdback", "stable", None, None], pa.string()))
    kept, left = without_holdback(rows, anchor_version=1, champion_version=3)
    assert left == 2 and kept["model_version"].to_pylist() == [3, 3]
