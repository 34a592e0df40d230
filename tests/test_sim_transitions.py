"""The randomised property test around daylight-saving transitions (tests/sim/
transitions.py), fixed seed: random crontabs and rrules in zones with every shape of
transition, each answer of the package (runs walked, next and first runs, coalesced
catch-up, missed-slot count) against the independent oracle. The long profile is
``python -m tests.sim.transitions --rules 10000``."""

from __future__ import annotations

from sim.transitions import run

RULES, SEED = 100, 2027


def test_random_rules_around_transitions_match_the_oracle() -> None:
    result = run(RULES, SEED)
    assert result.rules == RULES and result.runs > 1000 and result.probes > 5000
    assert not result.mismatches, "\n".join(result.mismatches[:20])
