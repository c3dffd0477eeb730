"""On the real tau2 tasks (when ../shared/tau2/data exists): the same scoring properties.

A few gold writes have no net effect on the database (they fail on purpose, repeat an
address, or are overwritten later); dropping those cannot change the score, so the test
checks that every write whose removal or alteration changes the gold database scores 0,
and that such writes are the large majority.
"""

from .scoring import scores


def test_every_tau2_task(tau2_env):
    env = tau2_env
    effective = ineffective = 0
    for tid in env.task_ids():
        oracle, gold, cases = scores(env, tid)
        assert oracle == 1.0 and gold == 1.0, tid
        for case, i, r, changes in cases:
            if changes:
                assert r == 0.0, (tid, case, i)
                effective += 1
            else:
                assert r == 1.0, (tid, case, i)
                ineffective += 1
    assert effective > 300 and ineffective < 20, (effective, ineffective)
