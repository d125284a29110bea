"""What a lifetime audit runs: the named suites, else the gate's target suite on its fixed draw
at the audit's margin plus the gate's guards; none when the audit is off."""

from __future__ import annotations

from gating.audit import audit_suites
from gating.config import AuditConfig, GateConfig, GuardSuite, SuiteConfig

GUARD = GuardSuite(name="solved", suite=SuiteConfig(size=40, seed=7))


def test_by_default_the_target_suite_fixed_and_the_guards():
    config = GateConfig(suite=SuiteConfig(size=24), guards=[GUARD])
    target, solved = audit_suites(config)
    assert target.name == "target" and target.suite.draw == "fixed"
    assert target.suite.size == 24 and target.max_drop == config.audit.margin == 0.03
    assert target.test == "non_inferior" and solved == GUARD
    assert config.audit.every == 3  # on by default


def test_named_suites_replace_the_default_and_none_turns_it_off():
    own = GuardSuite(name="mine", suite=SuiteConfig(size=8), max_drop=0.1)
    assert audit_suites(GateConfig(guards=[GUARD], audit=AuditConfig(suites=[own]))) == [own]
    assert audit_suites(GateConfig(audit=None)) == []
