"""The sentence that answers ``tracelens diff``: how the step changed, and whether what BEFORE's verdict
predicted for the change came true (docs/metrics.md, "Comparing two runs"). It states the diff's numbers as
printed; it measures nothing."""

from __future__ import annotations

from .base import ms, pct

_CAUSE_WORDS = {"peer-wait": "the wait for the last rank", "not-overlapped": "the transfers no compute hid",
                "overlap-tax": "the overlap tax"}


def summary_sentence(before, after, change_ns: int, prediction) -> str:
    """``before``/``after``: the DiffSides; ``change_ns``: AFTER's step time less BEFORE's."""
    if not before.step_ns or not after.step_ns:
        return "One of the runs has no step to compare."
    share = pct(100 * abs(change_ns) / before.step_ns)
    how = "faster" if change_ns < 0 else "slower" if change_ns > 0 else "no faster"
    first = (f"The step got {how} by {ms(abs(change_ns))} ({ms(before.step_ns)} → {ms(after.step_ns)}, {share})"
             if change_ns else f"The step time did not change ({ms(before.step_ns)})")
    if prediction is None:
        return first + "; no cause of BEFORE's verdict got smaller."
    what = _CAUSE_WORDS[prediction.cause]
    if prediction.predicted_ns is None:
        return (f"{first}; {what} got smaller, for which BEFORE's verdict made no prediction"
                + (f" ({prediction.note})." if prediction.note else "."))
    said = ms(prediction.predicted_ns)
    if prediction.predicted_low_ns != prediction.predicted_high_ns:
        said += f" ({prediction.predicted_low_ns / 1e6:.3f}–{prediction.predicted_high_ns / 1e6:.3f} ms)"
    verdict = "the prediction held" if prediction.held else "the prediction did not hold"
    return (f"{first}; for removing {what} BEFORE's verdict predicted {said}, observed "
            f"{ms(prediction.observed_ns)}: {verdict}.")
