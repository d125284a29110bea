"""experiments/gate_power.py: the projected sign test holds its level with no effect and finds a
large one."""

from experiments import gate_power as gp


def test_the_projection_holds_its_level_and_finds_a_large_gain():
    families = [f"f{i}" for i in range(30) for _ in range(2)]
    p = {f"f{i}": 0.3 for i in range(30)}
    null = gp.promoted_share(families, p, k=4, effect=0.0, decisions=400, seed=1)
    assert null <= gp.LEVEL + 0.03
    assert gp.promoted_share(families, p, k=16, effect=0.3, decisions=200, seed=2) > 0.95
    few = gp.promoted_share(families[:10], p, k=4, effect=0.1, decisions=400, seed=3)
    many = gp.promoted_share(families, p, k=16, effect=0.1, decisions=400, seed=3)
    assert few < many  # more families and more samples per function give more power
