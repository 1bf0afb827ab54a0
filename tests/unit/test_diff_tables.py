"""The prediction checked, as the dashboard's compare view says it (renderers/diff_tables.prediction_line):
each of its four cases on a hand-made Diff, every number set here."""

from __future__ import annotations

import pytest

from tracelens.contract.two_runs import Diff, DiffSide, Prediction
from tracelens.renderers.diff_tables import prediction_line

MS = 1_000_000


def _diff(prediction) -> Diff:
    side = DiffSide(label="x", ranks=2, world_size=2, steps=5, mode="cpu", step_ns=100 * MS, headline="", culprit=None)
    return Diff(summary="", before=side, after=side, step_change_ns=0, step_change=0.0, prediction=prediction,
                causes=[], changes=[])


@pytest.mark.parametrize("prediction, line", [
    (Prediction(cause="peer-wait", predicted_ns=40 * MS, predicted_low_ns=36 * MS, predicted_high_ns=46 * MS,
                observed_ns=38 * MS, held=True),
     "peer-wait: predicted 40.000 (36.000–46.000) ms, observed 38.000 ms: the prediction held"),
    # no interval: the saving alone
    (Prediction(cause="peer-wait", predicted_ns=3 * MS, predicted_low_ns=3 * MS, predicted_high_ns=3 * MS,
                observed_ns=1 * MS, held=False),
     "peer-wait: predicted 3.000 ms, observed 1.000 ms: the prediction did not hold"),
    (Prediction(cause="not-overlapped", predicted_ns=None, predicted_low_ns=None, predicted_high_ns=None,
                observed_ns=2_500_000, held=None, note="CPU ranks: the transfers share the compute's cores"),
     "not-overlapped: no prediction: CPU ranks: the transfers share the compute's cores; observed 2.500 ms"),
    (None, "no prediction: no cause of BEFORE's verdict got smaller"),
])
def test_the_prediction_checked_in_one_line(prediction, line):
    assert prediction_line(_diff(prediction)) == line
