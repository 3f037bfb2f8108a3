"""The kit's invariants in the default order, on the random models of the differential test
(tests/simpy_models.py): levels and counts within capacity, conservation through interrupts
and withdrawn operations, the order of service -- checked at every log call, on asyncio and on
trio.  The default order's log is its own, so it is not compared with SimPy's; asyncio's and
trio's may differ (docs/coming-from-simpy.md, row 19).  A file of its own so that the two
halves of the campaign run on different workers.
"""

from __future__ import annotations

from typing import Final

import pytest
import simpy_models as sm

MODELS: Final = 300
CHUNK: Final = 30


@pytest.mark.parametrize(
    "start", range(0, MODELS, CHUNK), ids=lambda s: f"seeds{s}-{s + CHUNK - 1}"
)
def test_default_order_keeps_the_invariants_on_both_backends(start: int) -> None:
    verdicts = [
        sm.evaluate(sm.generate(seed), order="virtualtime") for seed in range(start, start + CHUNK)
    ]
    report = sm.chunk_report(verdicts, "virtualtime", backends_must_agree=False)
    assert not report, report
